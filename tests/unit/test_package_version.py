"""The package's version from a checkout that was never installed (PYTHONPATH=checkout)."""

from __future__ import annotations

import importlib.metadata

from stragglerlab.util.package_version import package_version


def test_installed_version_is_the_distributions():
    assert package_version() == importlib.metadata.version("stragglerlab")


def test_a_bare_checkout_reads_unknown_instead_of_failing(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert package_version() == "unknown (not installed)"
