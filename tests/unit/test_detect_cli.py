"""`stragglerlab detect` / `score` on run folders, and the ground truth they are scored against."""

from __future__ import annotations

import json
import shutil

import pytest

from stragglerlab.analysis.detectors import RootCause
from stragglerlab.analysis.ground_truth import CLEAN, load_truths
from stragglerlab.cli import main
from stragglerlab.trace.trace_io import write_trace
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import (
    SlowWorker,
    SyntheticConfig,
    ground_truth,
    synthesize_trace,
)
from tests.unit.cli_errors import one_error


def make_run(path, faults=None, **kwargs):
    """A run folder (trace.parquet, meta.yaml, faults.json) of a synthetic job."""
    cfg = SyntheticConfig(**{"dp_size": 2, "pp_size": 2, "n_steps": 12, **kwargs})
    df, meta = synthesize_trace(cfg)
    path.mkdir(parents=True)
    write_trace(df, meta, path / "trace.parquet")
    meta.dump(path / "meta.yaml")
    records = ground_truth(df, cfg) if faults is None else faults
    (path / "faults.json").write_text(json.dumps(records))
    return path


def test_ground_truth_of_clean_windowed_job_wide_and_mitigation_runs(tmp_path):
    clean = make_run(tmp_path / "clean")
    slow = make_run(tmp_path / "slow", slow_workers=(SlowWorker(1, 1, 1.8, first_step=6),))
    gc = make_run(tmp_path / "gc", faults=[{"kind": "gc-pauses", "targets": [],
                                             "first_step": 0, "last_step": None,
                                             "requested": {"pause_ms": 100}, "measured": {}}])
    mitigated = make_run(tmp_path / "mit", faults=[{
        "kind": "stage-imbalance", "targets": [], "first_step": 0, "last_step": None,
        "requested": {"vocab": 4096, "rebalance": True}, "measured": {}}])
    t_clean, t_slow, t_gc, t_mit = load_truths([clean, slow, gc, mitigated])
    assert (t_clean.kind, t_clean.cause, t_clean.ranks) == (CLEAN, RootCause.NONE, frozenset())
    assert (t_slow.cause, t_slow.ranks, t_slow.fault_start_step) == (
        RootCause.SLOW_WORKER, frozenset({3}), 6)
    assert t_slow.measured_slowdown > 1.2  # windowed: measured within the run
    assert "within the run" in t_slow.note
    assert t_gc.ranks == frozenset({0, 1, 2, 3}) and t_gc.cause is RootCause.GC_PAUSES
    assert not t_mit.scored


def test_a_fault_measured_without_effect_is_left_out_of_the_truth(tmp_path):
    idle_gc = {"kind": "gc-pauses", "targets": [{"rank": 2, "dp_rank": 0, "stage": 1}],
               "first_step": 7, "last_step": 10, "requested": {"pause_ms": 45.0},
               "measured": {"pause_ms": None, "pauses": 0}}
    slow = make_run(tmp_path / "slow", slow_workers=(SlowWorker(1, 1, 1.8, first_step=6),))
    records = json.loads((slow / "faults.json").read_text())
    (slow / "faults.json").write_text(json.dumps(records + [idle_gc]))
    only = make_run(tmp_path / "only", faults=[idle_gc])
    paused = make_run(tmp_path / "paused", faults=[
        {**idle_gc, "measured": {"pause_ms": 50.0, "pauses": 1}}])
    t_slow, t_only, t_paused = load_truths([slow, only, paused])
    assert [f.kind for f in t_slow.faults] == ["slow-worker"]
    assert t_slow.ranks == frozenset({3}) and "without effect: gc-pauses" in t_slow.note
    assert (t_only.kind, t_only.cause, t_only.ranks) == (CLEAN, RootCause.NONE, frozenset())
    assert "without effect" in t_only.note
    assert t_paused.cause is RootCause.GC_PAUSES and t_paused.ranks == frozenset({2})


def test_missing_ground_truth_is_a_clear_error(tmp_path):
    run = make_run(tmp_path / "r")
    (run / "faults.json").unlink()
    with pytest.raises(InputError, match="faults.json"):
        load_truths([run])


def test_detect_writes_findings_and_score_writes_a_table_and_json(tmp_path, capsys):
    slow = make_run(tmp_path / "slow", slow_workers=(SlowWorker(0, 1, 1.8, first_step=4),))
    clean = make_run(tmp_path / "clean", seed=3)
    assert main(["detect", "--run", str(slow), "--detector", "whatif", "--online",
                 "--out", str(tmp_path / "det"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "det" / "whatif-online.json").read_text())
    assert doc["detector"] == "whatif" and doc["online"] is True
    (finding,) = doc["findings"]
    assert finding["ranks"] == [{"rank": 2, "dp_rank": 0, "stage": 1}]
    assert finding["root_cause"] == "slow-worker" and finding["detected_at_step"] >= 4

    # score reads findings and never runs a detector: missing ones are a clear error.
    capsys.readouterr()
    assert main(["score", "--runs", str(slow), str(clean), "--detector", "whatif",
                 "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"run `stragglerlab detect --run {slow} --detector whatif --out" in err
    assert not (tmp_path / "scores.json").exists()
    for run in (slow, clean):  # what the workflow runs: whatif, then detect offline and online
        assert main(["whatif", "--run", str(run), "--quiet"]) == 0
        for mode in ([], ["--online"]):
            assert main(["detect", "--run", str(run), "--detector", "whatif", *mode,
                         "--out", str(run / "detect"), "--quiet"]) == 0
    capsys.readouterr()
    scores = tmp_path / "scores.json"
    assert main(["score", "--runs", str(slow), str(clean), "--detector", "whatif",
                 "--out", str(tmp_path), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "whatif" in table and "f1" in table and "fault_median_latency_steps" in table
    assert json.loads(scores.read_text())["schema"] == "stragglerlab.scores/1"
    s = json.loads(scores.read_text())["whatif"]
    for key in ("precision", "recall", "f1", "root_cause_accuracy", "median_latency_steps",
                "slowdown_error", "by_kind", "confusion"):
        assert key in s
    assert s["f1"] == 1.0 and s["root_cause_accuracy"] == 1.0
    assert s["by_kind"]["slow-worker"]["median_latency_steps"] <= 2


def test_score_uses_findings_the_workflow_wrote(tmp_path, capsys):
    run = make_run(tmp_path / "clean")
    (run / "detect").mkdir()
    fake = {"detector": "whatif", "findings": [
        {"ranks": [{"rank": 0, "dp_rank": 0, "stage": 0}], "first_step": 0, "last_step": 1,
         "root_cause": "gc", "confidence": 1.0}]}
    (run / "detect" / "whatif.json").write_text(json.dumps(fake))
    scores = tmp_path / "scores.json"
    assert main(["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                 "--out", str(tmp_path), "--quiet"]) == 0
    assert json.loads(scores.read_text())["whatif"]["fp"] == 1


def _one_finding(first, last, cause="gc"):
    return {"ranks": [{"rank": 0, "dp_rank": 0, "stage": 0}], "first_step": first,
            "last_step": last, "root_cause": cause, "confidence": 1.0}


@pytest.mark.parametrize("first,last", [(30, 31), (13, 13), (0, 10**9)])
def test_score_refuses_a_finding_outside_the_runs_steps(tmp_path, capsys, first, last):
    run = make_run(tmp_path / "clean")  # traced steps 0-11
    (run / "detect").mkdir()
    (run / "detect" / "whatif.json").write_text(json.dumps(
        {"detector": "whatif", "findings": [_one_finding(first, last)]}))
    assert main(["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                 "--out", str(tmp_path), "--quiet"]) == 2
    line = one_error(capsys, "score")
    assert f"steps {first}-{last}, outside the run's steps 0-12" in line
    assert "rerun `stragglerlab detect" in line
    assert not (tmp_path / "scores.json").exists()


def test_score_takes_a_failure_named_at_the_step_after_the_trace(tmp_path):
    run = make_run(tmp_path / "hung")  # a hang names the step that never finished
    (run / "detect").mkdir()
    (run / "detect" / "whatif.json").write_text(json.dumps(
        {"detector": "whatif", "findings": [_one_finding(12, 12, "hang")]}))
    assert main(["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                 "--out", str(tmp_path), "--quiet"]) == 0


def test_score_refuses_findings_copied_from_another_run(tmp_path, capsys):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b", seed=3)
    for run in (a, b):
        (run / "detect").mkdir()
    (a / "detect" / "whatif.json").write_text(json.dumps(
        {"detector": "whatif", "run": str(a), "findings": [_one_finding(2, 3)]}))
    shutil.copy(a / "detect" / "whatif.json", b / "detect" / "whatif.json")
    assert main(["score", "--runs", str(b), "--detector", "whatif", "--offline-only",
                 "--out", str(tmp_path), "--quiet"]) == 2
    assert f"says it is of run {a}, not of this run {b}" in one_error(capsys, "score")
    # A moved run folder keeps a `run` that no longer exists: still scored.
    moved = tmp_path / "moved"
    a.rename(moved)
    assert main(["score", "--runs", str(moved), "--detector", "whatif", "--offline-only",
                 "--out", str(tmp_path), "--quiet"]) == 0


@pytest.mark.parametrize("argv,message", [
    (["detect", "--run", "{tmp}/nope", "--out", "{tmp}/det"], "no trace.parquet"),
    (["detect", "--run", "{run}", "--detector", "nosuch", "--out", "{tmp}/det"],
     "unknown detector"),
    (["score", "--runs", "{tmp}/nope", "--out", "{tmp}"], "not a run folder"),
    (["detect", "--run", "{run}", "--out", "{run}/trace.parquet"], "is a file, not a folder"),
    (["score", "--runs", "{run}", "--out", ""], "--out is empty"),
    (["detect", "--run", "{run}", "--out", "{run}/trace.parquet/x"], "is a file, so no folder"),
])
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, message):
    run = make_run(tmp_path / "run")
    argv = [a.format(tmp=tmp_path, run=run) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_set_changes_a_detector_setting_and_refuses_unknown_ones(tmp_path, capsys):
    from stragglerlab.analysis.detectors.registry import get_detector

    run = make_run(tmp_path / "slow", slow_workers=(SlowWorker(1, 1, 1.8, first_step=6),))
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    det = get_detector("whatif", {"device_compute_ratio": "1.5", "min_steps": "4"})
    assert det.config.device_compute_ratio == 1.5 and det.config.min_steps == 4
    assert main(["detect", "--run", str(run), "--set", "min_steps=40", "--out",
                 str(tmp_path / "d"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "d" / "whatif.json").read_text())
    assert doc["findings"] == []  # no straggler holds 40 steps of 12
    for bad, says in (("colour=red", "no setting 'colour'"), ("min_steps=x", "expected a int"),
                      ("min_steps", "expected NAME=VALUE"), ("seq_correlation=nan", "finite")):
        capsys.readouterr()
        assert main(["detect", "--run", str(run), "--set", bad, "--out",
                     str(tmp_path / "e")]) == 2
        assert says in capsys.readouterr().err


def test_online_window_shorter_than_min_steps_is_refused(tmp_path, capsys):
    run = make_run(tmp_path / "slow", slow_workers=(SlowWorker(0, 1, 1.8, first_step=4),))
    assert main(["detect", "--run", str(run), "--online", "--set", "online_window_steps=2",
                 "--out", str(tmp_path / "det"), "--quiet"]) == 2
    assert "online_window_steps=2 is under min_steps=3" in one_error(capsys, "detect")
    assert not (tmp_path / "det" / "whatif-online.json").exists()
    # Offline never uses the window: a long min_steps alone is a valid setting there.
    assert main(["detect", "--run", str(run), "--set", "min_steps=20",
                 "--out", str(tmp_path / "det"), "--quiet"]) == 0


def test_load_truths_refuses_a_run_listed_twice(tmp_path):
    run = make_run(tmp_path / "clean")
    with pytest.raises(InputError, match="given twice"):
        load_truths([run, tmp_path / "." / "clean"])
