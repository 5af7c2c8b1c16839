"""A job-wide regime change on a recorded run: the `whatif` detector offline and online,
and its scoring against the ground truth's `observable_as` (issue 60).

tests/data/job-wide/shared-ring-dp4-two is a real testbed run (Ray + gloo, pure DP 4,
the built-in `shared-ring-dp4-two` at seed 1, development seed set A): ranks 1 and 3's
links at 25 Mbit/s from step 6, which every member of the ring waits on."""

from __future__ import annotations

from pathlib import Path

import pytest

from stragglerlab.analysis.detectors import load_run
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.ground_truth import FaultTruth, RunTruth, load_truths
from stragglerlab.analysis.scoring import score_run
from stragglerlab.run.findings import Finding, RankRef, RootCause

RUN = Path(__file__).resolve().parents[1] / "data" / "job-wide" / "shared-ring-dp4-two"


@pytest.fixture(scope="module")
def run():
    return load_run(RUN)


def test_offline_the_change_is_named_with_its_window_and_kind(run):
    from stragglerlab.analysis.whatif import ComputeIdeal, run_whatif

    result = run_whatif(run.trace, run.meta, where=run.path,
                        compute_ideal=ComputeIdeal.MEAN).result
    found = WhatIfDetector().detect(run, result)
    assert [f.root_cause for f in found] == [RootCause.JOB_WIDE_COMM]
    f = found[0]
    assert (f.first_step, f.last_step) == (6, 11) and f.ranks == []
    assert f.detail["note"].startswith("from step 6, grads-reduce-scatter takes")
    assert "on every rank: a shared link or switch, not a straggler" in f.detail["note"]


def test_online_it_is_alerted_within_three_steps_of_its_start(run):
    found = WhatIfDetector().detect_online(run)
    wide = [f for f in found if f.root_cause is RootCause.JOB_WIDE_COMM]
    # A window holds at least two steps: alerted at the first step of the new regime, its
    # window then begins one step early (the step before it).
    assert len(wide) == 1 and wide[0].first_step in (5, 6) and wide[0].last_step == 11
    assert 6 <= wide[0].detected_at_step <= 6 + 3
    assert not [f for f in found if f.detected_at_step < 6]  # nothing before it began


def test_the_ground_truth_says_it_may_be_seen_job_wide_and_scoring_accepts_it():
    truth, = load_truths([RUN])
    fault, = truth.faults
    assert fault.observable_as == (RootCause.NET_THROTTLE, RootCause.JOB_WIDE_COMM)
    assert fault.shared_by == frozenset(range(4)) and fault.ranks == frozenset({1, 3})
    wide = Finding([], 6, 11, RootCause.JOB_WIDE_COMM, confidence=0.9)
    s = score_run(truth, [wide])
    assert (s.true_positives, s.false_positives, s.false_negatives) == (2, 0, 0)
    assert s.faults[0].recalled and s.faults[0].cause_right and s.cause_ok
    # Outside its window it places nothing.
    early = Finding([], 3, 5, RootCause.JOB_WIDE_COMM, confidence=0.9)
    assert not score_run(truth, [early]).faults[0].recalled


def _truth(kind: str, ranks: set[int], world: int, seen: tuple = ()) -> RunTruth:
    fault = FaultTruth(kind=kind, cause=RootCause(kind), ranks=frozenset(ranks),
                       first_step=5, last_step=None, observable_as=seen,
                       shared_by=frozenset(range(world)) if seen else frozenset())
    return RunTruth("r", kind, RootCause(kind), frozenset(ranks), world, 5, None,
                    faults=[fault], dp_size=2, pp_size=2, n_steps=10)


def test_a_job_wide_finding_is_not_accepted_where_a_peer_can_place_the_fault():
    plain = _truth("net-throttle", {2}, 4)  # DP 2 x PP 2: the ring and the pairs place it
    wide = Finding([], 5, 9, RootCause.JOB_WIDE_COMM, confidence=0.9)
    s = score_run(plain, [wide])
    assert not s.faults[0].cause_right and not s.cause_ok
    assert s.false_positives == 3                # the whole job named, one victim
    # Where it may be seen so, a job-wide finding naming the link's ends places it.
    shared = _truth("net-throttle", {1}, 2, (RootCause.NET_THROTTLE, RootCause.JOB_WIDE_COMM))
    ends = Finding([RankRef(0, 0, 0), RankRef(1, 0, 1)], 5, 9, RootCause.JOB_WIDE_COMM, 0.9)
    s = score_run(shared, [ends])
    assert (s.true_positives, s.false_positives) == (1, 0) and s.faults[0].cause_right
    # A wrong-rank throttle is still a wrong rank: the group is for job-wide findings only.
    wrong = Finding([RankRef(0, 0, 0)], 5, 9, RootCause.NET_THROTTLE, 0.9)
    assert score_run(shared, [wrong]).false_positives == 1


def test_observable_as_follows_the_layout():
    from stragglerlab.analysis.fault_observability import observable_as
    from stragglerlab.scenarios.faults import FaultRecord

    def rec(kind="net-throttle", measured=None):
        return FaultRecord(kind=kind, targets=[{"rank": 1, "dp_rank": 1, "stage": 0}],
                           first_step=5, last_step=None, requested={},
                           measured=measured or {})

    both = (RootCause.NET_THROTTLE, RootCause.JOB_WIDE_COMM)
    assert observable_as(rec(), dp=4, pp=1) == both          # a ring all wait on
    assert observable_as(rec(), dp=1, pp=2) == both          # the one pipeline link
    assert observable_as(rec(), dp=2, pp=2) == (RootCause.NET_THROTTLE,)
    assert observable_as(rec(), dp=1, pp=4) == (RootCause.NET_THROTTLE,)
    assert observable_as(rec("slow-worker"), dp=4, pp=1) == (RootCause.SLOW_WORKER,)
    said = rec("slow-worker", {"observable_as": ["job-wide-compute"]})
    assert observable_as(said, dp=2, pp=2) == (RootCause.SLOW_WORKER,
                                               RootCause.JOB_WIDE_COMPUTE)


def test_the_monitor_alerts_on_it_within_three_steps_of_its_start(run):
    from stragglerlab.monitor.window import analyse_window, make_detectors

    detectors = make_detectors(["whatif"])
    steps = sorted(run.trace["step"].unique())
    alerted = None
    for i in range(2, len(steps)):  # windows of the monitor's default 8 steps, as they grow
        window = run.trace[run.trace["step"].isin(steps[max(0, i - 7):i + 1])]
        line = analyse_window(window, run.meta, detectors, run.path, testbed=True,
                              window_steps=8)
        causes = {f["cause"] for f in line["findings"]}
        if steps[i] < 6:
            assert not causes, (steps[i], causes)  # nothing before the change
        elif "job-wide-comm" in causes:
            alerted = steps[i]
            break
    assert alerted is not None and alerted - 6 <= 3
