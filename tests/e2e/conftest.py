"""Fixtures of the slow end-to-end tests."""

from __future__ import annotations

import pytest

from tests.e2e.monitor_live import LiveRun


@pytest.fixture
def live(tmp_path):
    """A LiveRun in tmp_path, stopped at teardown."""
    mon = LiveRun(tmp_path / "run")
    yield mon
    mon.stop()
