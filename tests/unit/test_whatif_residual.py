"""The `whatif` detector's residual pass: remove what was found, simulate, diagnose again."""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors import RootCause, Run
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.detectors.whatif_evidence import Evidence
from stragglerlab.analysis.detectors.whatif_residual import ResidualJob, residual_findings
from stragglerlab.run.findings import Finding, RankRef
from stragglerlab.workloads.synthetic import SlowWorker
from tests.unit.whatif_runs import cells


def _finding(run: Run, cause: RootCause, workers, first: int, last: int) -> Finding:
    return Finding(ranks=[run.worker(d, s) for d, s in workers], first_step=first,
                   last_step=last, root_cause=cause, confidence=1.0)


def _rules(run: Run) -> list[Finding]:
    return WhatIfDetector()._rules_on_fresh_analysis(run)


def _compute(df, d: int, s: int) -> float:
    on = (df["dp_rank"] == d) & (df["stage"] == s) & df["optype"].isin(
        ["forward-compute", "backward-compute"])
    return float(df.loc[on, "duration"].sum())


def test_with_nothing_removed_the_simulated_job_is_the_traced_one(whatif_run):
    run = whatif_run(dp_size=2, pp_size=4, n_steps=6,
                     slow_workers=(SlowWorker(dp_rank=1, stage=2, factor=1.7),))
    out = ResidualJob.of(run).without([])
    np.testing.assert_allclose(out["start_ts"], run.trace["start_ts"], atol=1e-9)
    np.testing.assert_allclose(out["duration"], run.trace["duration"], atol=1e-9)


def test_a_removed_slow_worker_computes_like_its_peers_and_the_job_stops_straggling(whatif_run):
    run = whatif_run(dp_size=2, pp_size=2, n_steps=8,
                     slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=1.8),))
    slow = _finding(run, RootCause.SLOW_WORKER, [(1, 1)], 0, 7)
    out = ResidualJob.of(run).without([slow])
    assert _compute(run.trace, 1, 1) / _compute(run.trace, 0, 1) > 1.7
    assert abs(_compute(out, 1, 1) / _compute(out, 0, 1) - 1) < 0.02
    residual = Run(out, run.meta, run.path)
    assert Evidence.analyse(run).view.slowdown > 1.3
    assert Evidence.analyse(residual).view.slowdown < 1.05


def test_the_fault_a_first_pass_left_out_is_found_once_the_other_is_removed(whatif_run):
    # Given a first pass that named only the larger fault, the residual names the other
    # on its own cell and window, and says what was removed before it.
    run = whatif_run(dp_size=2, pp_size=2, n_steps=12, slow_workers=(
        SlowWorker(dp_rank=0, stage=0, factor=2.0),
        SlowWorker(dp_rank=1, stage=1, factor=1.4, first_step=5)))
    big = _finding(run, RootCause.SLOW_WORKER, [(0, 0)], 0, 11)
    (extra,) = residual_findings(run, [big], _rules)
    assert extra.root_cause is RootCause.SLOW_WORKER and extra.ranks == [RankRef(3, 1, 1)]
    assert extra.first_step == 5
    assert extra.detail["residual_of"] == [{"root_cause": "slow-worker", "ranks": [0]}]


def test_a_single_fault_removed_leaves_nothing_to_name(whatif_run):
    run = whatif_run(dp_size=4, pp_size=2, n_steps=10,
                     slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=2.0),))
    (found,) = WhatIfDetector().detect(run)
    assert residual_findings(run, [found], _rules) == []


def test_no_first_finding_means_no_residual_pass(whatif_run):
    calls = []
    assert residual_findings(whatif_run(), [], lambda r: calls.append(r) or []) == []
    assert calls == []


def test_a_pause_inside_a_receive_is_given_back_by_its_sender_too(whatif_run):
    # A blocking send waits for its paused receiver: removing the receiver's pause alone
    # would leave the wait on the sender, and the residual would call that a slow link.
    run = whatif_run(dp_size=1, pp_size=2, n_steps=6)
    df = run.trace
    recv = np.flatnonzero(((df["stage"] == 1) & (df["optype"] == "forward-recv")
                           & (df["step"] == 3)).to_numpy())[0]
    mb = df.loc[recv, "seq_id"]
    send = np.flatnonzero(((df["stage"] == 0) & (df["optype"] == "forward-send")
                           & (df["step"] == 3) & (df["seq_id"] == mb)).to_numpy())[0]
    df["gc_pause_s"] = 0.0
    df.loc[recv, "gc_pause_s"] = 0.2
    df.loc[recv, "duration"] += 0.2
    df.loc[send, "duration"] += 0.2  # the sender waited as long
    gc = _finding(run, RootCause.GC_PAUSES, [(0, 1)], 0, 5)
    out = ResidualJob.of(run).without([gc])
    assert out.loc[recv, "gc_pause_s"] == 0.0
    assert out.loc[send, "duration"] < df.loc[send, "duration"] - 0.15


def test_a_pause_between_ops_goes_with_the_gc_too(whatif_run):
    # A pause that falls between two ops is the next op's launch delay: the paused rank
    # arrives late at its collective. Left in, the residual would call it a slow link.
    run = whatif_run(dp_size=4, pp_size=1, n_steps=6)
    job = ResidualJob.of(run)
    node = int(np.flatnonzero(job.graph.optype == "grads-reduce-scatter")[0])
    step = 3
    job.frame.launch_delay[node, step, 2] += 0.2  # rank 2 paused just before it
    kept = job.without([])
    gone = job.without([_finding(run, RootCause.GC_PAUSES, [(2, 0)], 0, 5)])
    ends = {name: (out["start_ts"] + out["duration"])[out["step"] == step].max()
            for name, out in (("kept", kept), ("gone", gone))}
    assert ends["kept"] - ends["gone"] > 0.19  # the step no longer waits for the pause
    other = job.without([_finding(run, RootCause.GC_PAUSES, [(1, 0)], 0, 5)])
    # Another rank's GC does not take this rank's pause (its own delays go to their
    # median: microseconds).
    assert abs((other["start_ts"] + other["duration"])[other["step"] == step].max()
               - ends["kept"]) < 1e-3


def test_a_leftover_on_a_removed_cell_or_a_link_end_is_not_a_new_fault(whatif_run):
    from stragglerlab.analysis.detectors.whatif_arbitration import residual_part as _new_part

    run = whatif_run(dp_size=4, pp_size=2)
    link = _finding(run, RootCause.NET_THROTTLE, [(1, 1)], 0, 9)
    slow = _finding(run, RootCause.SLOW_WORKER, [(3, 0)], 0, 9)
    board = [link, slow]
    ring_neighbour = _finding(run, RootCause.NET_THROTTLE, [(2, 1)], 0, 9)
    assert _new_part(ring_neighbour, board, board, 4) is None
    on_slow_cell = _finding(run, RootCause.NET_THROTTLE, [(3, 0)], 0, 9)
    assert _new_part(on_slow_cell, board, board, 4) is None
    elsewhere = _finding(run, RootCause.SLOW_WORKER, [(3, 0), (3, 1)], 0, 9)
    assert cells(_new_part(elsewhere, board, board, 4)) == [(3, 1)]
    stage = _finding(run, RootCause.STAGE_IMBALANCE, [(d, 1) for d in range(4)], 0, 9)
    assert _new_part(stage, board, board, 4) is None  # the removal moved the balance
    gc = _finding(run, RootCause.GC_PAUSES, [], 0, 9)
    assert _new_part(stage, [gc], [gc], 4) is stage  # an exact removal did not
