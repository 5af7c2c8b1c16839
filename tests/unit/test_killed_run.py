"""A run folder whose `train` driver was killed (driver.json left, no run.json) is read as
a failed run with the steps every rank finished; a live, foreign or damaged driver record
is refused with one clear message."""

from __future__ import annotations

import json
import os
import platform

import pytest

from stragglerlab.cli import main
from stragglerlab.host.residue import driver_mark
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.killed_run import (
    KILLED_KIND,
    finish_killed_run,
    write_driver_record,
)
from tests.unit.monitor_helpers import synth

DEAD = f"{os.getpid()}:0"
"""This pid with start ticks no process has: a driver that is gone (its pid reused)."""


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A finished 6-step DP 2 x PP 2 synth run."""
    return synth(tmp_path_factory.mktemp("killed") / "src", "--steps", "6")


def killed(run, src, *, mark=DEAD, host=None, partial_rank_step=True):
    """A run folder as a driver killed after step 4 leaves it: every rank's parts of steps
    0-4, ranks 0-1 of step 5, and driver.json (slow-worker-1-dp2-pp2, no warm-up)."""
    scenario = load_scenario("slow-worker-1-dp2-pp2", overrides={"run": {"warmup_steps": 0}})
    write_driver_record(run, scenario)
    rec = json.loads((run / "driver.json").read_text())
    rec["driver"] = mark
    rec["host"] = host or platform.node()
    (run / "driver.json").write_text(json.dumps(rec))
    feeder = PartsFeeder(run, RunFolder(path=src).trace())
    for step in feeder.steps[:5]:
        feeder.write_step(step)
    if partial_rank_step:
        feeder.write_step(feeder.steps[5], ranks=[0, 1])
    return run


def test_a_killed_drivers_folder_is_finished_as_a_failed_run(tmp_path, src):
    run = killed(tmp_path / "run", src)
    note = finish_killed_run(run)
    assert note and "driver was killed" in note and "5 steps" in note
    folder = RunFolder(path=run)
    assert folder.record.outcome == "failed" and folder.record.error.kind == KILLED_KIND
    assert sorted(folder.trace()["step"].unique()) == [0, 1, 2, 3, 4]  # step 5 unfinished
    assert [f.kind for f in folder.faults] == ["slow-worker"]  # the ground truth kept
    assert not (run / "driver.json").exists()
    assert finish_killed_run(run) is None  # once


@pytest.mark.parametrize("verb", [["whatif"], ["detect", "--detector", "step-changepoint"]])
def test_the_reading_verbs_finish_it_themselves(tmp_path, src, verb, capsys):
    run = killed(tmp_path / "run", src)
    assert main([verb[0], "--run", str(run), *verb[1:]]) == 0
    assert "driver was killed" in capsys.readouterr().err
    assert RunFolder(path=run).record.error.kind == KILLED_KIND


def test_score_reads_it_as_a_failed_run(tmp_path, src):
    run = killed(tmp_path / "run", src)
    assert main(["score", "--runs", str(run), "--detector", "step-changepoint", "--offline-only",
                 "--out", str(tmp_path / "none"), "--quiet"]) == 2  # not detected yet
    assert RunFolder(path=run).record.error.kind == KILLED_KIND  # but finished
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert main(["detect", "--run", str(run), "--detector", "whatif", "--quiet"]) == 0
    out = tmp_path / "scores"
    assert main(["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                 "--out", str(out), "--quiet"]) == 0
    scores = json.loads((out / "scores.json").read_text())
    assert "slow-worker" in json.dumps(scores)  # its ground truth scored


def test_a_live_driver_is_not_finished(tmp_path, src, capsys):
    run = killed(tmp_path / "run", src, mark=driver_mark())  # this process: alive
    with pytest.raises(InputError, match="still going"):
        finish_killed_run(run)
    assert main(["whatif", "--run", str(run)]) == 2
    assert "still going" in capsys.readouterr().err
    assert not (run / "run.json").exists() and (run / "driver.json").exists()


def test_a_driver_on_another_host_is_not_judged_here(tmp_path, src):
    run = killed(tmp_path / "run", src, host="another-host-" + platform.node())
    with pytest.raises(InputError, match="ran on host"):
        finish_killed_run(run)


@pytest.mark.parametrize("text", ["{", "[]", '{"host": 3}', "\x00\x01"])
def test_a_damaged_driver_record_is_one_clear_error(tmp_path, src, text, capsys):
    run = killed(tmp_path / "run", src)
    (run / "driver.json").write_text(text)
    assert main(["whatif", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "driver.json" in err and "Traceback" not in err
