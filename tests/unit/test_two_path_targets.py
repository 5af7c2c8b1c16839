"""benchmarks/two_path_differential.py against the ground truth: the target ranks it reads
from a run's faults.json, and how often each path's top worker is one of them."""

from __future__ import annotations

from pathlib import Path

from tests.unit.bench_modules import load_benchmark

REPO = Path(__file__).resolve().parents[2]
bench = load_benchmark("two_path_differential")


def test_targets_are_the_ground_truths_ranks(tmp_path):
    assert bench._targets(REPO / "examples" / "slow-worker") == [3]
    assert bench._targets(REPO / "tests" / "data" / "job-wide" / "shared-ring-dp4-two") == [1, 3]
    assert bench._targets(REPO / "examples" / "kineto-dp2-pp2") == []  # bare traces
    assert bench._targets(tmp_path) == []


def _row(targets, voc_top, gen_top):
    row = {"S_rel_diff": 0.0, "within_2pct": True, "same_top_worker": voc_top == gen_top,
           "same_gate": True, "same_named_workers": True, "targets": targets}
    if targets:
        row["vocabulary_top_on_target"] = bool(set(voc_top) & set(targets))
        row["general_top_on_target"] = bool(set(gen_top) & set(targets))
    return row


def test_summary_counts_each_paths_top_worker_on_a_target():
    rows = [_row([2], [0], [2]), _row([3], [3], [3]), _row([], [1], [0]), _row([1], [0], [2])]
    summ = bench.summary(rows)
    assert summ["with_targets"] == 3
    assert summ["vocabulary_top_on_target"] == 1
    assert summ["general_top_on_target"] == 2
    assert summ["same_top_worker"] == 1
