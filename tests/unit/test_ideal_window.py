"""`whatif --ideal-window N`: the ideal taken within windows of N steps, beside the paper's
cross-step ideal, so a job that changes regime within its trace reads per-step S near 1 in
each regime instead of far under 1 before the change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stragglerlab.analysis.whatif import run_whatif, windowed_ideal
from stragglerlab.cli import main
from stragglerlab.run.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[2]
SHARED_RING = ROOT / "tests" / "data" / "job-wide" / "shared-ring-dp4-two"
"""A recorded DP 4 run whose two ring links were throttled from step 6 (every rank waits)."""


@pytest.fixture(scope="module")
def recorded():
    folder = RunFolder(path=SHARED_RING)
    return folder.trace(), folder.meta


def test_one_window_of_every_step_is_the_cross_step_ideal(recorded):
    df, meta = recorded
    run = run_whatif(df, meta, "recorded", ideal_window=len(df["step"].unique()))
    (window,) = run.result.ideal_windows
    assert window["slowdown"] == run.result.slowdown  # the same ideal, bit for bit
    assert window["first_step"] == min(run.result.steps)
    assert window["last_step"] == max(run.result.steps)


def test_windows_hold_each_regime_to_its_own_ideal(recorded):
    df, meta = recorded
    plain = run_whatif(df, meta, "recorded").result
    run = run_whatif(df, meta, "recorded", ideal_window=3)
    assert run.result.slowdown == plain.slowdown  # the result stays the paper's
    assert plain.ideal_windows is None
    cross = {int(s): v for s, v in plain.step_slowdown().items()}
    windowed = {int(s): v for w in run.result.ideal_windows
                for s, v in w["step_slowdown"].items()}
    assert sorted(windowed) == sorted(cross)
    before = [s for s in cross if s < 6]
    assert max(cross[s] for s in before) < 0.7  # the cross-step ideal mixes both regimes
    assert min(windowed[s] for s in before) > 0.9  # each window its own regime
    assert any("--ideal-window" in n for n in run.result.notes)


def test_the_windows_cover_the_steps_in_order(recorded):
    df, meta = recorded
    run = run_whatif(df, meta, "recorded")
    steps = run.result.steps
    windows = windowed_ideal(run.graph, run.frame, run.frame.sim_value(run.graph),
                             run.result.step_time_nodelay.values, 4)
    assert [(w["first_step"], w["last_step"]) for w in windows] == [
        (steps[i], steps[min(i + 4, len(steps)) - 1]) for i in range(0, len(steps), 4)]


def test_the_cli_writes_them_and_refuses_a_bad_window(tmp_path, capsys):
    out = tmp_path / "w"
    assert main(["whatif", "--run", str(SHARED_RING), "--out", str(out), "--ideal-window",
                 "3", "--quiet"]) == 0
    doc = json.loads((out / "whatif.json").read_text())
    assert len(doc["ideal_windows"]) == 3
    plain = tmp_path / "p"
    assert main(["whatif", "--run", str(SHARED_RING), "--out", str(plain), "--quiet"]) == 0
    assert "ideal_windows" not in json.loads((plain / "whatif.json").read_text())
    capsys.readouterr()
    assert main(["whatif", "--run", str(SHARED_RING), "--out", str(tmp_path / "z"),
                 "--ideal-window", "0"]) == 2
    err = capsys.readouterr().err
    assert "--ideal-window 0" in err and "Traceback" not in err
    assert not (tmp_path / "z").exists()
