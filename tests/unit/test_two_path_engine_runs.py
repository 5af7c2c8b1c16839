"""The two analysis paths on engine runs traced with the torch profiler (slow tier: five
short runs trained here, ~1.5 min on 2 cores, then imported both ways).

The engine posts its pipeline sends and receives on a helper thread, so the general path
reads them as posted P2P (stragglerlab/importers/general_async.py): its replay must
reproduce every run without releasing a group. Where the two paths' ideals are the same
(pure DP: every rank does the same work) they agree in S within 2 %, in the workers they
name and in the verdict. In DP 2 x PP 2 the general ideal pools a stage's ranks and then
loads every stage evenly, where the vocabulary one pools each op type over every stage,
so S may differ by a few per cent (benchmarks/README.md, "The two analysis paths on the
same traces"); both name the slowed worker, and both see a heavy last stage.

    .venv/bin/python -m pytest -m slow tests/unit/test_two_path_engine_runs.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.bench_modules import load_benchmark

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[2] / "benchmarks" / "two-path-scenarios.yaml"
RUNS = ("tp-clean-dp1-pp2", "tp-clean-dp2-pp2", "tp-slow-dp2-pp1", "tp-slow-dp2-pp2",
        "tp-imbalance-dp2-pp2")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    bench = load_benchmark("two_path_differential")
    out = tmp_path_factory.mktemp("two-path-runs")
    runs = bench.train([f"{name}:0" for name in RUNS], CONFIG, out)
    return {name: {**bench.compare(run), "folder": run} for name, run in
            zip(RUNS, runs, strict=True)}


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


def test_a_heavy_last_stage_is_a_stage_on_both_paths(rows):
    """The last stage's logit layer (vocab 4096) makes it heavy: the general ideal loads
    both stages evenly, reads the job straggling as the vocabulary path does, and its
    `whatif` detector names the stage's two DP ranks as one stage-imbalance finding."""
    from stragglerlab.analysis.general_findings import import_findings
    from stragglerlab.run.whatif_reader import read_whatif_summary

    row = rows["tp-imbalance-dp2-pp2"]
    assert row["vocabulary"]["verdict"] == row["general"]["verdict"] == "straggling"
    assert set(row["general"]["top_workers"]) <= {2, 3}  # stage 1: global ranks 2 and 3
    folder = row["folder"] / "two-path" / "general"
    assert read_whatif_summary(folder / "whatif.json").S > 1.1
    found = import_findings(folder)
    assert [f.root_cause.value for f in found] == ["stage-imbalance"]
    assert sorted(r.rank for r in found[0].ranks) == [2, 3]
