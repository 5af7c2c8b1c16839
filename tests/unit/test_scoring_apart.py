"""Scoring beside F1: unobservable faults apart, recall by magnitude (the sensitivity curve)
and false findings per 1,000 clean worker-steps (analysis/suite_score.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.detectors.base import Finding, RankRef, RootCause
from stragglerlab.analysis.fault_control import clean_steps
from stragglerlab.analysis.fault_observability import observability
from stragglerlab.analysis.ground_truth import CLEAN, FaultTruth, RunTruth, _fault_truths
from stragglerlab.analysis.scoring import score_run
from stragglerlab.analysis.suite_score import score_suite
from stragglerlab.scenarios.faults import FaultRecord


def _fault(kind: str, ranks: set[int], slowdown: float | None = None,
           observable: bool = True) -> FaultTruth:
    return FaultTruth(kind=kind, cause=RootCause.of_kind(kind), ranks=frozenset(ranks),
                      first_step=0, last_step=None, measured_slowdown=slowdown,
                      observable=observable)


def _run(name: str, *faults: FaultTruth, steps: int = 10) -> RunTruth:
    ranks = frozenset().union(*[f.ranks for f in faults]) if faults else frozenset()
    kind = faults[0].kind if faults else CLEAN
    cause = faults[0].cause if faults else RootCause.NONE
    return RunTruth(name, kind, cause, ranks, 4, 0 if faults else None, None,
                    faults=list(faults), dp_size=4, pp_size=1, n_steps=steps)


def _names(*ranks: int, cause=RootCause.SLOW_WORKER) -> Finding:
    return Finding([RankRef(r, r, 0) for r in ranks], 0, 9, cause, 0.9)


def test_an_unobservable_fault_counts_neither_way():
    truth = _run("d", _fault("net-delay", {2}, observable=False))
    for findings in ([], [_names(2, cause=RootCause.NET_THROTTLE)]):
        s = score_run(truth, findings)
        assert (s.true_positives, s.false_positives, s.false_negatives) == (0, 0, 0)
    # a finding elsewhere is still false
    assert score_run(truth, [_names(0)]).false_positives == 1
    out = score_suite([truth], {"d": [_names(2, cause=RootCause.NET_THROTTLE)]}).to_json()
    assert out["n_faults"] == 0 and out["unobservable_faults"] == 1
    assert out["unobservable_recalled"] == 1 and out["fault_recall"] is None


def test_a_fault_beside_an_unobservable_one_is_scored_as_usual():
    truth = _run("m", _fault("slow-worker", {1}), _fault("net-delay", {2}, observable=False))
    s = score_run(truth, [])
    assert s.false_negatives == 1 and [f.observable for f in s.faults] == [True, False]


def test_sensitivity_is_recall_by_the_faults_measured_slowdown():
    truths = [_run("a", _fault("slow-worker", {1}, 1.02)),
              _run("b", _fault("slow-worker", {1}, 1.03)),
              _run("c", _fault("slow-worker", {1}, 1.3)),
              _run("d", _fault("slow-worker", {1}, 0.98)),    # drift: the lowest bin
              _run("e", _fault("slow-worker", {1}, None))]
    found = {"b": [_names(1)], "c": [_names(1)], "e": [_names(1)]}
    rows = score_suite(truths, found).to_json()["sensitivity"]
    first = rows[0]
    assert (first["lo"], first["hi"], first["n"], first["recalled"]) == (1.0, 1.05, 3, 1)
    (mid,) = [r for r in rows if r["lo"] == 1.2]
    assert (mid["n"], mid["recall"]) == (1, 1.0)
    assert rows[-1]["lo"] is None and rows[-1]["n"] == 1   # not separable
    assert sum(r["n"] for r in rows) == 5


def test_false_findings_are_counted_per_1000_clean_worker_steps():
    truths = [_run("c1", steps=50), _run("c2", steps=50), _run("f", _fault("slow-worker", {1}))]
    found = {"c1": [_names(0), _names(3)], "f": [_names(1), _names(2)]}
    out = score_suite(truths, found).to_json()
    # two findings over 2 clean runs x 4 workers x 50 steps = 400 worker-steps
    assert out["false_findings_per_1k_clean_worker_steps"] == 5.0
    assert (out["clean_runs"], out["clean_runs_with_findings"]) == (2, 1)


def test_old_in_process_delays_in_pure_dp_are_unobservable():
    old = "in-process delay (this kernel has no netem)"
    rec = FaultRecord("net-delay", [{"rank": 1, "dp_rank": 1, "stage": 0}], 0, None,
                      {"delay_ms": 15}, {"delay_ms": 14.8, "mechanism": old})
    assert observability(rec, pp_size=1)[0] is False
    assert observability(rec, pp_size=2)[0] is True      # P2P shows it
    rec.measured["observable"] = True                     # a record that says so wins
    assert observability(rec, pp_size=1)[0] is True


def _two_rank_throttle(victim: int, mechanism: str = "tc-tbf") -> FaultRecord:
    return FaultRecord("net-throttle", [{"rank": victim, "dp_rank": victim, "stage": 0}], 0,
                       None, {"rate_mbit": 50}, {"mechanism": mechanism})


def test_a_link_throttled_both_ways_in_a_two_worker_job_is_placed_by_either_end():
    from stragglerlab.analysis.fault_observability import alike_ranks

    assert alike_ranks(_two_rank_throttle(0), 2) == {0, 1}
    assert alike_ranks(_two_rank_throttle(0), 4) == {0}  # other links tell them apart
    assert alike_ranks(_two_rank_throttle(0, "in-process pacing (no network namespaces)"),
                       2) == {0}  # the fallback delays the victim's own sends only
    fault = FaultTruth(kind="net-throttle", cause=RootCause.NET_THROTTLE, ranks=frozenset({0}),
                       first_step=0, last_step=None, alike=frozenset({0, 1}))
    truth = RunTruth("t", "net-throttle", RootCause.NET_THROTTLE, frozenset({0}), 2, 0, None,
                     faults=[fault], dp_size=2, pp_size=1, n_steps=10)
    throttle = RootCause.NET_THROTTLE
    for named in ((0, 1), (1,), (0,)):
        s = score_run(truth, [_names(*named, cause=throttle)])
        assert (s.true_positives, s.false_positives, s.false_negatives) == (1, 0, 0), named
        assert s.faults[0].recalled
    s = score_run(truth, [])
    assert (s.true_positives, s.false_negatives) == (0, 1)
    # The other end slowed by a fault of its own is that fault's, not the throttle's.
    slow = _fault("slow-worker", {1})
    both = RunTruth("b", "net-throttle", RootCause.NET_THROTTLE, frozenset({0, 1}), 2, 0, None,
                    faults=[fault, slow], dp_size=2, pp_size=1, n_steps=10)
    s = score_run(both, [_names(1, cause=throttle)])
    assert (s.true_positives, s.false_negatives) == (1, 1)


def _truths_of(first_steps: list[int], last_steps: list[int | None], traced=range(3, 16)):
    recs = [FaultRecord("slow-worker", [{"rank": i, "dp_rank": i, "stage": 0}], f, last,
                        {"factor": 2.0}, {}) for i, (f, last) in
            enumerate(zip(first_steps, last_steps))]
    times = pd.Series([1.0 if s < min(first_steps) else 1.5 for s in traced], index=list(traced))
    return _fault_truths(recs, 4, times, first_traced=min(traced), dp_size=4, pp_size=1)


def test_each_unmeasured_fault_says_why():
    from stragglerlab.analysis.fault_control import Unmeasured

    (late,) = _truths_of([6], [None])        # steps 3, 4, 5 clean: measured in the run
    assert late.measured_slowdown == 1.5 and late.unmeasured is None
    (early,) = _truths_of([5], [None])       # two clean steps: too few
    assert early.measured_slowdown is None and early.unmeasured is Unmeasured.FEW_CLEAN_STEPS
    (built_in,) = _truths_of([0], [None])    # an imbalance: no clean step at all
    assert built_in.unmeasured is Unmeasured.FROM_THE_START
    a, b = _truths_of([6, 9], [None, None])  # b's window is a's too; a alone on 6, 7, 8
    assert (a.measured_slowdown, b.unmeasured) == (1.5, Unmeasured.BESIDE_ANOTHER)
    a, b = _truths_of([6, 8], [None, None])  # a alone on 6, 7 only
    assert (a.unmeasured, b.unmeasured) == (Unmeasured.BESIDE_ANOTHER,) * 2
    a, b = _truths_of([6, 9], [8, None])     # apart in time: both measured
    assert a.measured_slowdown == b.measured_slowdown == 1.5
    a, b = _truths_of([6, 7], [8, None])     # b alone on 9..15: measured there, a is not
    assert a.unmeasured is Unmeasured.BESIDE_ANOTHER and b.measured_slowdown == 1.5
    a, b = _truths_of([6, 7], [12, None])    # b alone on 13, 14, 15: enough steps
    assert b.measured_slowdown == 1.5 and b.unmeasured is None
    a, b = _truths_of([6, 7], [13, None])    # 14, 15: too few
    assert b.measured_slowdown is None and b.unmeasured is Unmeasured.BESIDE_ANOTHER


def test_clean_steps_after_a_window_are_the_control_of_a_fault_from_the_start():
    recs = [FaultRecord("net-delay", [{"rank": 0, "dp_rank": 0, "stage": 0}], 3, 8,
                        {"delay_ms": 15}, {})]
    traced = range(3, 16)  # steps 3..8 faulty, 9..15 clean
    times = pd.Series([1.2 if s <= 8 else 1.0 for s in traced], index=list(traced))
    (f,) = _fault_truths(recs, 2, times, first_traced=3, dp_size=2, pp_size=1)
    assert f.measured_slowdown == pytest.approx(1.2) and f.unmeasured is None
    (f,) = _fault_truths(recs, 2, times.loc[:10], first_traced=3, dp_size=2, pp_size=1)
    assert f.measured_slowdown is None and f.unmeasured.value == "few-clean-steps"  # 9, 10


def test_clean_steps_are_those_outside_every_window():
    recs = [FaultRecord("slow-worker", [{"rank": 1}], 0, 5, {}, {}),
            FaultRecord("gc-pauses", [], 9, 10, {}, {})]
    steps = np.arange(3, 14)
    assert list(steps[clean_steps(steps, recs, first_traced=3)]) == [6, 7, 8, 11, 12, 13]


def test_score_prints_why_faults_are_unmeasured_and_what_to_change():
    from stragglerlab.analysis.fault_control import Unmeasured
    from stragglerlab.cli.score import noise_table

    few = FaultTruth(kind="slow-worker", cause=RootCause.SLOW_WORKER, ranks=frozenset({1}),
                     first_step=5, last_step=None, unmeasured=Unmeasured.FEW_CLEAN_STEPS)
    out = score_suite([_run("a", few), _run("b", _fault("slow-worker", {1}, 1.3))], {}).to_json()
    assert out["sensitivity"][-1]["why"] == {"few-clean-steps": 1}
    text = "\n".join(noise_table([("whatif", out)]))
    assert "unmeasured: 1 fault(s), few-clean-steps: start faults at least 3 traced steps" in text
    assert "first_step >= run.warmup_steps + 3" in text


def test_train_notes_a_fault_placed_too_early_to_measure():
    from stragglerlab.analysis.fault_control import early_start_note

    # steps count from 0: with 3 warm-up steps, steps 3, 4 and 5 are the first traced
    note = early_start_note([5], warmup_steps=3)
    assert note and "starts at step 5, 2 traced step(s) after the warm-up" in note
    assert "traced steps start at 3" in note and "first_step >= run.warmup_steps + 3" in note
    assert early_start_note([6], warmup_steps=3) is None     # 3 clean traced steps
    assert early_start_note([5], warmup_steps=2) is None     # 2, 3 and 4 are
    assert early_start_note([0], warmup_steps=3) is None     # from the start: vs clean runs
    assert early_start_note([0, 5], warmup_steps=3) is None
    assert early_start_note([7, 5], warmup_steps=3) is not None
    assert early_start_note([5], warmup_steps=3, last_steps=[8], steps=16) is None  # 9..15
    assert early_start_note([5], warmup_steps=3, last_steps=[13], steps=16) is not None
    assert early_start_note([5], warmup_steps=3, last_steps=[None], steps=16) is not None


def test_recall_over_the_floor_leaves_out_only_faults_measured_under_it():
    from dataclasses import replace

    under = replace(_fault("net-delay", {1}, 1.04), over_floor=0.76)   # missed, in the noise
    over = replace(_fault("slow-worker", {2}, 1.4), over_floor=12.8)   # named
    unknown = _fault("gc-pauses", {3})                                 # not measured: stays in
    out = score_suite([_run("a", under), _run("b", over), _run("c", unknown)],
                      {"b": [_names(2)]}).to_json()
    assert out["fault_recall"] == pytest.approx(1 / 3)
    assert out["fault_recall_over_floor"] == pytest.approx(1 / 2)
    assert (out["faults_below_floor"], out["faults_below_floor_recalled"]) == (1, 0)
    assert out["fault_cause_accuracy_over_floor"] == pytest.approx(1 / 2)
    assert len(out["ci"]["fault_recall_over_floor"]) == 2
