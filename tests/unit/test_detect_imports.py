"""Detectors and scoring on an unannotated import (the general op model): every detector
that needs only steps, ranks and span times runs on the import's spans; one that compares
ops by name says so; `import --faults` carries the ground truth `score` needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.detectors import TraceNeed, detector_names, get_detector
from stragglerlab.trace.op_model import STEP_END
from stragglerlab.trace.step_view import GENERAL_COMM, GENERAL_COMPUTE, layout_of, step_view

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEP_TIME_DETECTORS = [n for n in detector_names()
                       if get_detector(n).needs is TraceNeed.STEP_TIMES]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stragglerlab", *args], capture_output=True,
                          text=True)


def _ops(rows: list[tuple]) -> pd.DataFrame:
    """An op table from (rank, step, k, kind, start, end, gap) rows."""
    f = pd.DataFrame(rows, columns=["rank", "step", "k", "kind", "start_s", "end_s", "gap_s"])
    return f.assign(dp_rank=-1, stage=-1)


def test_the_spans_of_a_chain_cover_its_step():
    """Each row's compute gap before it and its own op: the spans of a rank's step tile it
    from its first gap's start to its step end."""
    ops = _ops([(0, 1, 0, "all_reduce", 0.3, 0.5, 0.3), (0, 1, 1, STEP_END, 0.6, 0.6, 0.1),
                (1, 1, 0, "all_reduce", 0.25, 0.5, 0.25), (1, 1, 1, STEP_END, 0.55, 0.55, 0.05)])
    spans = step_view(ops)
    r0 = spans[spans["rank"] == 0]
    assert r0["optype"].tolist() == [GENERAL_COMPUTE, GENERAL_COMM, GENERAL_COMPUTE]
    assert np.allclose(r0["start_ts"], [0.0, 0.3, 0.5])
    assert np.isclose(r0["duration"].sum(), 0.6)  # the whole step, nothing twice
    assert (spans["duration"] >= 0).all()


def test_the_layout_of_an_import():
    """Without a layout every rank is its own data-parallel worker (as the what-if names
    them); with one, its DP x PP."""
    ops = _ops([(r, 1, 0, STEP_END, 0.1, 0.1, 0.1) for r in range(4)])
    assert (layout_of(ops).dp_size, layout_of(ops).pp_size) == (4, 1)
    known = ops.assign(dp_rank=ops["rank"] % 2, stage=ops["rank"] // 2)
    assert (layout_of(known).dp_size, layout_of(known).pp_size) == (2, 2)


def test_every_detector_says_what_it_needs():
    """The baselines that compare named ops need the vocabulary; the step-time ones and the
    what-if run on an import."""
    needs = {n: get_detector(n).needs for n in detector_names()}
    assert needs["whatif"] is TraceNeed.WHATIF
    assert {"bocd", "minder", "nvrx", "step-changepoint"} <= set(STEP_TIME_DETECTORS)
    assert needs["rank-score"] is TraceNeed.OP_VOCABULARY


@pytest.fixture(scope="module")
def ddp_import(tmp_path_factory) -> Path:
    """The torch DDP example (rank 1 slowed from step 6), imported with its ground truth."""
    out = tmp_path_factory.mktemp("imp") / "ddp"
    proc = run_cli("import", "kineto", "--traces", str(EXAMPLES / "torch-ddp" / "kineto"),
                   "--faults", str(EXAMPLES / "torch-ddp" / "faults.json"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "faults.json").read_text())[0]["kind"] == "slow-worker"
    return out


def test_detect_and_score_on_an_import(ddp_import):
    """Every applicable detector writes findings, offline and (step-time ones) online; the
    what-if names the victim; `score --detector all` scores those and leaves the others
    out, saying why."""
    for name in ["whatif", *STEP_TIME_DETECTORS]:
        proc = run_cli("detect", "--run", str(ddp_import), "--detector", name)
        assert proc.returncode == 0, proc.stderr
    for name in STEP_TIME_DETECTORS:
        proc = run_cli("detect", "--run", str(ddp_import), "--detector", name, "--online")
        assert proc.returncode == 0, proc.stderr
    (f,) = json.loads((ddp_import / "detect" / "whatif.json").read_text())["findings"]
    assert [r["rank"] for r in f["ranks"]] == [1] and f["root_cause"] == "slow-worker"
    out = ddp_import.parent / "scores"
    proc = run_cli("score", "--runs", str(ddp_import), "--detector", "all", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    scores = json.loads((out / "scores.json").read_text())
    assert set(scores) - {"schema"} == {"whatif", *STEP_TIME_DETECTORS}
    assert scores["whatif"]["recall"] == 1.0 and scores["whatif"]["precision"] == 1.0
    assert "rank-score: not scored" in proc.stderr


def test_a_detector_that_needs_op_names_says_so_once(ddp_import):
    proc = run_cli("detect", "--run", str(ddp_import), "--detector", "rank-score")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "op vocabulary" in proc.stderr and "step-changepoint" in proc.stderr
    online = run_cli("detect", "--run", str(ddp_import), "--detector", "whatif", "--online")
    assert online.returncode == 2 and "drop --online" in online.stderr


def test_ground_truth_is_checked_and_not_lost(tmp_path):
    """--faults naming a rank the import does not have is one clear error, and nothing is
    written; a re-import with --faults replaces the truth, one without it leaves the folder
    as it is and says why."""
    traces = str(EXAMPLES / "torch-ddp" / "kineto")
    bad = tmp_path / "faults.json"
    truth = json.loads((EXAMPLES / "torch-ddp" / "faults.json").read_text())
    truth[0]["targets"] = [{"rank": 7, "dp_rank": 7, "stage": 0}]
    bad.write_text(json.dumps(truth))
    out = tmp_path / "imp"
    proc = run_cli("import", "kineto", "--traces", traces, "--faults", str(bad),
                   "--out", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "faults.json" in proc.stderr and not out.exists()
    clean = tmp_path / "clean.json"
    clean.write_text("[]")
    for truth_file in (EXAMPLES / "torch-ddp" / "faults.json", clean):
        proc = run_cli("import", "kineto", "--traces", traces, "--faults", str(truth_file),
                       "--out", str(out))
        assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "faults.json").read_text()) == []
    kept = run_cli("import", "kineto", "--traces", traces, "--out", str(out))
    assert kept.returncode == 2 and "faults.json" in kept.stderr
    assert json.loads((out / "faults.json").read_text()) == []
