"""Scoring findings against ground truth: rank-level P/R/F1, root cause, latency, slowdown error."""

from __future__ import annotations

import pytest

from stragglerlab.analysis.detectors.base import Finding, RankRef, RootCause
from stragglerlab.analysis.ground_truth import CLEAN, RunTruth
from stragglerlab.analysis.scoring import score_run
from stragglerlab.analysis.suite_score import score_suite


def _truth(run: str, kind: str, cause: RootCause, ranks: set[int], start: int | None = 4,
           measured: float | None = None) -> RunTruth:
    return RunTruth(run, kind, cause, frozenset(ranks), 4, start, measured)


def _finding(ranks: list[int], cause: RootCause, confidence: float = 0.9,
             estimate: float | None = None, at: int | None = None) -> Finding:
    return Finding([RankRef(r, r % 2, r // 2) for r in ranks], 0, 9, cause, confidence,
                   estimate, at)


def test_exact_finding_is_one_true_positive_and_the_right_cause():
    s = score_run(_truth("a", "slow-worker", RootCause.SLOW_WORKER, {1}),
                  [_finding([1], RootCause.SLOW_WORKER)])
    assert (s.true_positives, s.false_positives, s.false_negatives) == (1, 0, 0)
    assert s.predicted_cause is RootCause.SLOW_WORKER


def test_any_finding_on_a_clean_run_is_a_false_positive():
    s = score_run(_truth("c", CLEAN, RootCause.NONE, set(), start=None),
                  [_finding([2], RootCause.SLOW_WORKER)])
    assert (s.true_positives, s.false_positives, s.false_negatives) == (0, 1, 0)
    assert s.predicted_cause is RootCause.SLOW_WORKER and s.true_cause is RootCause.NONE


def test_job_level_finding_names_every_rank():
    s = score_run(_truth("a", "slow-worker", RootCause.SLOW_WORKER, {3}),
                  [_finding([], RootCause.SLOW_WORKER)])
    assert (s.true_positives, s.false_positives, s.false_negatives) == (1, 3, 0)


def test_most_confident_finding_sets_the_predicted_cause():
    s = score_run(_truth("a", "gc-pauses", RootCause.GC_PAUSES, {0, 1, 2, 3}),
                  [_finding([0], RootCause.SLOW_WORKER, 0.4),
                   _finding([0, 1, 2, 3], RootCause.GC_PAUSES)])
    assert s.predicted_cause is RootCause.GC_PAUSES
    assert (s.true_positives, s.false_positives, s.false_negatives) == (4, 0, 0)


def test_latency_counts_the_first_true_finding_at_or_after_the_fault_start():
    online = [_finding([0], RootCause.SLOW_WORKER, at=2),   # before the fault: a false alarm
              _finding([1], RootCause.SLOW_WORKER, at=6),   # the victim, 2 steps in
              _finding([1], RootCause.SLOW_WORKER, at=9)]
    s = score_run(_truth("a", "slow-worker", RootCause.SLOW_WORKER, {1}, start=4), [], online)
    assert s.latency_steps == 2


def test_slowdown_error_is_relative_to_the_measured_slowdown():
    s = score_run(_truth("a", "slow-worker", RootCause.SLOW_WORKER, {1}, measured=1.5),
                  [_finding([1], RootCause.SLOW_WORKER, estimate=1.2)])
    assert s.slowdown_error == pytest.approx(0.2)


def test_suite_metrics_confusion_and_per_kind_breakdown():
    truths = [_truth("a", "slow-worker", RootCause.SLOW_WORKER, {1}),
              _truth("b", "slow-worker", RootCause.SLOW_WORKER, {2}),
              _truth("c", CLEAN, RootCause.NONE, set(), start=None)]
    findings = {"a": [_finding([1], RootCause.SLOW_WORKER)],
                "b": [_finding([3], RootCause.NET_THROTTLE)],
                "c": []}
    out = score_suite(truths, findings).to_json()
    assert (out["tp"], out["fp"], out["fn"]) == (1, 1, 1)
    assert out["precision"] == pytest.approx(0.5) and out["recall"] == pytest.approx(0.5)
    assert out["f1"] == pytest.approx(0.5)
    assert out["root_cause_accuracy"] == pytest.approx(2 / 3)
    assert out["confusion"] == {"none": {"none": 1},
                                 "slow-worker": {"net-throttle": 1, "slow-worker": 1}}
    assert out["by_kind"]["clean"]["precision"] == 1.0
    assert out["by_kind"]["slow-worker"]["f1"] == pytest.approx(0.5)
    assert out["median_latency_steps"] is None


def test_unscored_runs_are_left_out():
    mitigation = _truth("m", "gc-pauses", RootCause.GC_PAUSES, {0, 1, 2, 3})
    mitigation.scored = False
    out = score_suite([mitigation], {"m": []}).to_json()
    assert out["n_runs"] == 0


def test_cause_accuracy_compares_kinds_a_trace_can_tell_apart():
    truths = [_truth("d", "net-delay", RootCause.NET_DELAY, {1}),
              _truth("h", "crash", RootCause.CRASH, {2}),
              _truth("s", "slow-worker", RootCause.SLOW_WORKER, {3})]
    findings = {"d": [_finding([1], RootCause.NET_THROTTLE)],   # same cause: a slow link
                "h": [_finding([2], RootCause.HANG)],           # same cause: the rank stopped
                "s": [_finding([3], RootCause.NET_THROTTLE)]}   # wrong cause
    out = score_suite(truths, findings).to_json()
    assert out["root_cause_accuracy"] == pytest.approx(2 / 3)
    assert out["confusion"]["net-delay"] == {"net-throttle": 1}


def test_precision_interval_follows_the_point_rule_when_nothing_is_named():
    from stragglerlab.analysis.suite_score import metrics

    missed = [score_run(_truth(f"m{i}", "slow-worker", RootCause.SLOW_WORKER, {1}), [])
              for i in range(5)]
    m = metrics(missed)
    assert m["precision"] == 0.0 and m["ci"]["precision"] == [0.0, 0.0]
    clean = [score_run(_truth(f"c{i}", CLEAN, RootCause.NONE, set(), start=None), [])
             for i in range(5)]
    m = metrics(clean)
    assert m["precision"] == 1.0 and m["ci"]["precision"] == [1.0, 1.0]
