"""The monitor on an unannotated import (monitor/import_replay.py): the import's steps are
replayed window by window, each window's general what-if and the detectors that need only
step times write the windows.jsonl lines the page, /metrics and alerts read; a detector
that needs the op vocabulary is named once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.config import MonitorConfig
from stragglerlab.monitor.history import read_lines
from stragglerlab.monitor.import_replay import ImportMonitor, monitor_for
from tests.unit.bench_modules import load_benchmark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAULT_FIRST = 6
"""The torch examples: one rank runs at half speed from this step (their faults.json)."""
JOBS = {"torch-ddp": ((), (2, 1)), "torch-fsdp": ((), (2, 1)),
        "torch-pipelining": (("--layout", "dp=2,pp=2"), (2, 2))}
"""examples/ job -> (import flags, its DP x PP)."""


def _import(example: str, out: Path) -> Path:
    """examples/<example> (steps 2-13), imported with its ground truth."""
    truth = EXAMPLES / example / "faults.json"
    assert json.loads(truth.read_text())[0]["first_step"] == FAULT_FIRST
    assert main(["import", "kineto", "--traces", str(EXAMPLES / example / "kineto"),
                 *JOBS[example][0], "--faults", str(truth), "--out", str(out),
                 "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def ddp_import(tmp_path_factory) -> Path:
    """The torch DDP example (2 ranks, rank 1 slow), imported."""
    return _import("torch-ddp", tmp_path_factory.mktemp("mon") / "ddp")


@pytest.fixture(scope="module")
def clean_import(tmp_path_factory) -> Path:
    """A clean 4-rank GPU DDP job (benchmarks/kineto_synth.py: no slow rank, 2 % jitter per
    rank and step), imported."""
    base = tmp_path_factory.mktemp("clean")
    synth = load_benchmark("kineto_synth")
    synth.write_job(base / "traces", ranks=4, mb=0.1, steps=8, slow_rank=-1, slow_factor=1.0,
                    workers=1)
    out = base / "imp"
    assert main(["import", "kineto", "--traces", str(base / "traces"), "--out", str(out),
                 "--quiet"]) == 0
    return out


def _windows(run: Path) -> list[dict]:
    return [x for x in read_lines(run / "monitor" / "windows.jsonl") if x["kind"] == "window"]


def _named(window: dict, detector: str = "whatif") -> set[int]:
    return {r["rank"] for f in window["findings"] if f["detector"] == detector
            for r in f["ranks"]}


def _fresh(run: Path, tmp_path: Path) -> Path:
    """A copy of the import without a monitor history (each test its own)."""
    import shutil

    dst = tmp_path / run.name
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns("monitor"))
    return dst


@pytest.mark.parametrize("example", list(JOBS))
def test_the_slow_rank_is_named_from_the_fault_on_and_not_before(example, ddp_import,
                                                                   tmp_path, capsys):
    run = (_fresh(ddp_import, tmp_path) if example == "torch-ddp"
           else _import(example, tmp_path / example))
    (victim,) = json.loads((run / "faults.json").read_text())[0]["targets"]
    assert main(["monitor", "--run", str(run), "--once", "--window-steps", "4",
                 "--detectors", "whatif", "nvrx", "--quiet"]) == 0
    assert "steps 10-13" in capsys.readouterr().out
    lines = read_lines(run / "monitor" / "windows.jsonl")
    assert [x["kind"] for x in lines] == ["window"] * 12  # steps 2-13, no error
    windows = _windows(run)
    assert [w["step"] for w in windows] == list(range(2, 14))
    assert windows[-1]["steps"] == [10, 11, 12, 13]
    for w in windows:
        assert w["op_model"] == "general" and (w["dp_size"], w["pp_size"]) == JOBS[example][1]
        assert w["valid"] is True and abs(w["simulation_discrepancy"]) < 0.05
        if w["step"] < FAULT_FIRST:
            assert w["findings"] == [] and w["slowdown"] < 1.05, w
        elif w["step"] == FAULT_FIRST:  # one slow step of four: S at the 1.1 threshold
            assert _named(w) <= {victim["rank"]}, w  # (1.098-1.100 on the pipelining job)
        else:  # every window holding two slow steps names the victim, from its slow steps on
            assert _named(w) == {victim["rank"]}, w
            (f,) = [f for f in w["findings"] if f["detector"] == "whatif"]
            assert f["cause"] == "slow-worker" and f["first_step"] >= FAULT_FIRST
            assert f["ranks"] == [victim]
        assert _named(w, "nvrx") <= {victim["rank"]}  # it ran on the window's spans
    last = windows[-1]
    assert last["slowdown"] > 1.2  # half speed on one rank, every step of the window
    grid = last["worker_slowdown"]
    assert grid[victim["stage"]][victim["dp_rank"]] == max(max(row) for row in grid)
    assert last["optype_slowdown"]["compute"] == max(last["optype_slowdown"].values())
    assert last["top_workers"] == [{"dp_rank": victim["dp_rank"], "stage": victim["stage"]}]
    assert last["lag_from_step_end_s"] is None  # the import's clock is not this host's
    # One look analysed it all: a second one resumes after step 13, analysing nothing.
    assert main(["monitor", "--run", str(run), "--once", "--window-steps", "4",
                 "--detectors", "whatif", "nvrx", "--quiet"]) == 0
    assert len(read_lines(run / "monitor" / "windows.jsonl")) == 12


def test_the_page_metrics_and_alerts_show_the_import(ddp_import, tmp_path):
    from starlette.testclient import TestClient

    from stragglerlab.monitor.server import make_app

    run = _fresh(ddp_import, tmp_path)
    hook = tmp_path / "alerts.txt"
    mon = monitor_for(MonitorConfig(run=run, alert_command=f"cat >> {hook}",
                                    alert_backoff_s=0.01))
    assert isinstance(mon, ImportMonitor)
    assert mon.run(once=True) == 12
    with TestClient(make_app(mon.state, run)) as client:
        data = client.get("/api/windows").json()
        assert [x["step"] for x in data["lines"]] == list(range(2, 14))
        assert data["summary"]["layout"] == [2, 1] and data["summary"]["run_ended"]
        truth = client.get("/api/truth").json()
        assert truth["faults"][0]["targets"][0]["rank"] == 1
        text = client.get("/metrics").text
    assert 'stragglerlab_findings{cause="slow-worker"} 1' in text
    scores = {m[0]: float(m[1]) for m in re.findall(
        r'^stragglerlab_worker_slowdown\{(dp_rank="\d+",stage="\d+")\} (\S+)$', text, re.M)}
    assert max(scores, key=scores.get) == 'dp_rank="1",stage="0"'
    alerts = [json.loads(x) for x in hook.read_text().splitlines()]
    assert [a["event"] for a in alerts] == ["finding-appeared"]
    assert alerts[0]["step"] > FAULT_FIRST
    assert alerts[0]["finding"]["ranks"][0]["rank"] == 1


def test_a_clean_import_has_no_finding(clean_import, tmp_path):
    run = _fresh(clean_import, tmp_path)
    assert main(["monitor", "--run", str(run), "--once", "--quiet"]) == 0
    windows = _windows(run)
    assert [w["step"] for w in windows] == list(range(8))
    for w in windows:
        assert w["findings"] == [] and w["valid"] is True and w["slowdown"] < 1.05, w
        # A GPU trace with its launches: the compute attribution split host / device.
        assert {"compute", "host", "device", "all_reduce"} <= set(w["optype_slowdown"])
    assert len(windows[-1]["worker_slowdown"][0]) == 4


def test_a_detector_that_needs_op_names_is_named_once(ddp_import, tmp_path, capsys):
    run = _fresh(ddp_import, tmp_path)
    assert main(["monitor", "--run", str(run), "--once", "--no-serve",
                 "--detectors", "whatif", "rank-score"]) == 0
    err = capsys.readouterr().err
    said = [x for x in err.splitlines() if "rank-score" in x]
    assert len(said) == 1 and "op vocabulary" in said[0] and "runs whatif" in said[0]
    log = (run / "monitor" / "monitor.log").read_text()
    assert log.count("rank-score") == 1
    windows = _windows(run)
    assert len(windows) == 12
    assert all(f["detector"] == "whatif" for w in windows for f in w["findings"])
    # Only detectors that need the op names: refused, naming those that run, nothing written.
    other = _fresh(ddp_import, tmp_path / "other")
    assert main(["monitor", "--run", str(other), "--once", "--detectors", "rank-score",
                 "op-minmax", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no detector of --detectors runs on an unannotated import" in err
    assert "rank-score, op-minmax compare ops" in err and "nvrx" in err
    assert not (other / "monitor").exists()


def test_what_an_import_cannot_take_is_one_clear_error(ddp_import, tmp_path, capsys):
    run = _fresh(ddp_import, tmp_path)
    assert main(["monitor", "--run", str(run), "--once", "--dp", "2", "--quiet"]) == 2
    assert "--layout dp=N,pp=M" in capsys.readouterr().err
    assert main(["monitor", "--run", str(run), "--once", "--warmup-steps", "20",
                 "--quiet"]) == 2
    assert "pass --warmup-steps 13 or less" in capsys.readouterr().err
    (run / "ops.parquet").write_bytes(b"not parquet")
    other = _fresh(run, tmp_path / "bad")
    assert main(["monitor", "--run", str(other), "--once", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "ops.parquet" in err and "import the traces again" in err
    assert not (other / "monitor").exists()


def test_several_jobs_watched_take_an_import_too(ddp_import, tmp_path, capsys):
    from stragglerlab.monitor.fleet import find_runs

    run = _fresh(ddp_import, tmp_path / "results" / "job")
    assert find_runs(tmp_path / "results") == [run]
    assert main(["monitor", "--watch", str(tmp_path / "results"), "--once", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "12 window(s) analysed now" in out and "slow-worker" in out
