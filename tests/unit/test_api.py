"""The notebook API (stragglerlab.open -> stragglerlab.api.Job): DataFrames out, each
computed once, the same numbers as the verbs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import stragglerlab  # noqa: E402
from stragglerlab.cli import main  # noqa: E402
from stragglerlab.util.errors import InputError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slow-worker"


def test_open_a_run_folder_matches_the_verbs(tmp_path, capsys):
    # A copy holding only the run's own files (the README's first minute writes
    # whatif/, plot/ and detect/ into examples/slow-worker).
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns("whatif", "plot", "detect"))
    before = sorted(p.name for p in run.iterdir())
    job = stragglerlab.open(run)
    assert main(["whatif", "--trace", str(EXAMPLE / "trace.parquet"), "--meta",
                 str(EXAMPLE / "meta.yaml"), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "w" / "whatif.json").read_text())
    assert job.summary()["slowdown"] == pytest.approx(doc["slowdown"])
    workers = job.workers()
    assert len(workers) == 8 and list(workers.columns) == ["dp_rank", "stage", "s_dp",
                                                           "s_stage", "worker_score"]
    top = workers.iloc[0]
    assert (top.dp_rank, top.stage) == (1, 1)  # the example's slowed worker
    assert job.optypes().iloc[0]["optype"] == "backward-compute"
    assert len(job.steps()) == 8
    truth = job.truth()
    assert truth[["kind", "dp_rank", "stage"]].values.tolist() == [["slow-worker", 1, 1]]
    assert main(["detect", "--run", str(run), "--detector", "rank-score", "--out",
                 str(tmp_path / "d"), "--quiet"]) == 0
    cli = json.loads((tmp_path / "d" / "rank-score.json").read_text())["findings"]
    assert len(job.detect("rank-score")) == sum(len(f["ranks"]) or 1 for f in cli)
    found = job.detect("whatif")  # whatif.json absent: the job's own analysis is handed over
    assert found[["root_cause", "dp_rank", "stage"]].values.tolist() == [["slow-worker", 1, 1]]
    assert sorted(p.name for p in run.iterdir()) == before  # the facade never writes there


def test_each_result_is_computed_once(monkeypatch):
    import stragglerlab.api as api

    calls = []
    real = api.analyze
    monkeypatch.setattr(api, "analyze", lambda *a, **k: calls.append(1) or real(*a, **k))
    job = stragglerlab.open(EXAMPLE)
    job.summary(), job.workers(), job.steps(), job.detect("whatif"), job.detect("whatif")
    assert calls == [1]
    fig = job.heatmap()
    assert fig.axes[0].get_xlabel() == "DP rank" and fig.axes[0].get_ylabel() == "PP rank"


def test_a_trace_file_with_its_meta_and_bad_paths(tmp_path):
    job = stragglerlab.open(EXAMPLE / "trace.parquet", meta=EXAMPLE / "meta.yaml")
    assert job.truth().empty and job.summary()["workers"] == 8
    with pytest.raises(InputError, match="no run folder or trace file"):
        stragglerlab.open(tmp_path / "nothing")
