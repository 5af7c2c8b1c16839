"""This package's version, also when it runs from a source tree that was never installed."""

from __future__ import annotations


def package_version() -> str:
    """The installed distribution's version, "unknown (not installed)" from a bare checkout
    (PYTHONPATH=checkout), so a run record never fails for want of package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stragglerlab")
    except PackageNotFoundError:
        return "unknown (not installed)"
