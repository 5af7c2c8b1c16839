"""The two analysis paths on engine runs traced with the torch profiler (slow tier: four
short runs trained here, ~1 min on 2 cores, then imported both ways).

The engine posts its pipeline sends and receives on a helper thread, so the general path
reads them as posted P2P (stragglerlab/importers/general_async.py): its replay must
reproduce every run without releasing a group. Where the two paths' ideals are the same
(pure DP: every rank does the same work) they agree in S within 2 %, in the workers they
name and in the verdict; in DP 2 x PP 2 the general ideal pools a stage's ranks only,
so S differs by design (benchmarks/README.md, "The two analysis paths on the same
traces"), but both name the slowed worker.

    .venv/bin/python -m pytest -m slow tests/unit/test_two_path_engine_runs.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.bench_modules import load_benchmark

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[2] / "benchmarks" / "two-path-scenarios.yaml"
RUNS = ("tp-clean-dp1-pp2", "tp-clean-dp2-pp2", "tp-slow-dp2-pp1", "tp-slow-dp2-pp2")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    bench = load_benchmark("two_path_differential")
    out = tmp_path_factory.mktemp("two-path-runs")
    runs = bench.train([f"{name}:0" for name in RUNS], CONFIG, out)
    return {name: bench.compare(run) for name, run in zip(RUNS, runs, strict=True)}


def test_both_paths_replay_every_run_and_the_general_one_releases_nothing(rows):
    for name, row in rows.items():
        voc, gen = row["vocabulary"], row["general"]
        assert "error" not in voc and "error" not in gen, name
        assert gen["released_groups"] == 0, name
        assert abs(gen["discrepancy"]) < 0.05 and gen["valid"], name
        assert voc["valid"], name


def test_pure_dp_agrees_in_s_named_workers_and_verdict(rows):
    row = rows["tp-slow-dp2-pp1"]
    assert row["within_2pct"] and row["same_named_workers"] and row["same_gate"]
    assert row["general"]["top_workers"] == [1]  # DP rank 1, slowed 1.8x
    assert row["general"]["verdict"] == "straggling"


def test_pipelines_name_the_same_slowed_worker_and_nobody_when_clean(rows):
    slow = rows["tp-slow-dp2-pp2"]  # (DP 1, stage 1) slowed: global rank 3
    assert slow["vocabulary"]["top_workers"] == slow["general"]["top_workers"] == [3]
    assert slow["vocabulary"]["verdict"] == slow["general"]["verdict"] == "straggling"
    for name in ("tp-clean-dp1-pp2", "tp-clean-dp2-pp2"):
        assert rows[name]["same_named_workers"] and rows[name]["same_gate"], name
        assert rows[name]["general"]["verdict"] == "not straggling", name
