"""Shared by the monitor's unit tests: synthetic sources replayed into trace parts."""

from __future__ import annotations

from pathlib import Path

from stragglerlab.cli import main
from stragglerlab.monitor import Monitor, MonitorConfig
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.run.run_folder import RunFolder

FAULT_FIRST = 5
"""The synthetic slow worker (DP 1, stage 1) starts at this step."""


def synth(out: Path, *extra: str) -> Path:
    """A DP 2 x PP 2 `stragglerlab synth` run folder at `out`."""
    assert main(["synth", "--out", str(out), "--dp", "2", "--pp", "2", "--quiet", *extra]) == 0
    return out


def make_feeder(src: Path, run: Path) -> PartsFeeder:
    """Replays `src`'s trace into `run`'s trace parts, step by step."""
    return PartsFeeder(run, RunFolder(path=src).trace())


def make_monitor(run: Path, **kw) -> Monitor:
    """A monitor on `run` that retries alerts without waiting."""
    kw.setdefault("alert_backoff_s", 0.01)
    return Monitor(MonitorConfig(run=run, **kw))


def named(window: dict) -> set[tuple[str, int, int]]:
    """(cause, dp_rank, stage) of every worker a window's findings name."""
    return {(f["cause"], r["dp_rank"], r["stage"]) for f in window["findings"] for r in f["ranks"]}
