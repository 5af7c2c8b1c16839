"""Evidence over time (analysis/over_time.py) and the job-wide rule on synthetic per-step
data: pure, no Ray, no what-if."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.over_time import (
    change_point,
    changed_kinds,
    kind_times,
    link_times,
    over_time,
    step_times,
)
from stragglerlab.run.findings import RootCause
from stragglerlab.trace.meta import JobMeta


def _dp_trace(dp: int, n_steps: int, slow_from: int | None = None, slow_to: int | None = None,
              factor: float = 8.0, compute_factor: float = 1.0, seed: int = 0,
              op: str = "grads-reduce-scatter") -> pd.DataFrame:
    """A pure-DP trace of 0.1 s of compute, then a reduce-scatter (0.05 s) and an all-gather
    (0.02 s) every rank enters together, each op jittering by 2 %. In steps
    [slow_from, slow_to] `op` takes `factor` times as long on every rank (a ring every
    member waits on) and the compute `compute_factor` times."""
    rng = np.random.default_rng(seed)
    rows, t = [], 0.0
    for step in range(n_steps):
        slow = slow_from is not None and step >= slow_from and (slow_to is None
                                                                or step <= slow_to)
        durs = {"forward-compute": 0.1 * (compute_factor if slow else 1.0),
                "grads-reduce-scatter": 0.05, "params-all-gather": 0.02}
        if slow:
            durs[op] *= factor
        start = t
        for name, d in durs.items():
            span = d * (1 + rng.normal(0, 0.02))
            for r in range(dp):
                rows.append((r, r, 0, step, name, start, span * (1 + rng.normal(0, 0.005))))
            start += span * 1.01
        t = start + 0.001
    return pd.DataFrame(rows, columns=["rank", "dp_rank", "stage", "step", "optype",
                                       "start_ts", "duration"])


def test_a_sustained_jump_is_found_with_its_start_and_open_end():
    steps = np.arange(3, 15)
    t = np.r_[np.full(3, 0.43), np.full(9, 3.4)] * (1 + 0.01 * np.sin(steps))
    cp = change_point(steps, t)
    assert (cp.first_step, cp.last_step) == (6, None)
    assert cp.ratio == pytest.approx(3.4 / 0.43, rel=0.03)
    assert cp.slow_part(steps) == (6, 14)


def test_a_window_that_ends_has_its_last_step():
    steps = np.arange(12)
    t = np.where((steps >= 4) & (steps <= 7), 1.0, 0.4) + 0.002 * steps
    cp = change_point(steps, t)
    assert (cp.first_step, cp.last_step) == (4, 7) and cp.ratio > 2
    # A slow start that ends: the change is read from where it ends, the slow part before.
    t2 = np.where(steps < 5, 1.0, 0.4)
    cp2 = change_point(steps, t2)
    assert (cp2.first_step, cp2.last_step) == (5, None) and cp2.ratio < 1
    assert cp2.slow_part(steps) == (0, 4)


def test_one_outlier_or_noise_is_not_a_sustained_change():
    steps = np.arange(12)
    spike = np.full(12, 0.5)
    spike[6] = 5.0                     # one slow step (a GC pause): a window needs two
    cp = change_point(steps, spike)
    assert cp is None or cp.factor < 1.5 or cp.first_step != 6 or cp.last_step != 6
    rng = np.random.default_rng(3)
    for _ in range(50):                # 5 % jitter never reads a change of 1.5x
        cp = change_point(steps, 0.5 * (1 + rng.normal(0, 0.05, 12)))
        assert cp is None or cp.factor < 1.5
    assert change_point(steps[:3], spike[:3]) is None        # too short for two sides
    assert change_point(steps, np.r_[spike[:-1], np.nan]) is None


def test_the_kind_that_moved_is_named_on_every_rank():
    trace = _dp_trace(4, 12, slow_from=5)
    steps, sec = step_times(trace)
    cp = change_point(steps, sec)
    assert cp.first_step == 5 and cp.last_step is None
    kinds = changed_kinds(kind_times(trace), cp, steps, ratio=1.5)
    assert [k.kind for k in kinds] == ["grads-reduce-scatter"]
    assert kinds[0].ratio == pytest.approx(8.0, rel=0.1)
    assert kinds[0].every_rank and kinds[0].ranks_moved == [0, 1, 2, 3] and kinds[0].comm
    ot = over_time(trace, dp=4, pp=1)
    assert ot.comm and ot.note().startswith(
        "from step 5, grads-reduce-scatter takes 8.")
    assert "on every rank: a shared link or switch, not a straggler" in ot.note()
    assert ot.kind_changes["grads-reduce-scatter"].first_step == 5


def test_a_compute_change_is_not_comm():
    trace = _dp_trace(2, 10, slow_from=4, factor=1.0, compute_factor=3.0)
    ot = over_time(trace, dp=2, pp=1)
    assert ot.change.first_step == 4 and not ot.comm
    assert ot.kinds[0].kind == "forward-compute"


def _pp2_trace(n_steps: int, slow_from: int, factor: float = 10.0) -> pd.DataFrame:
    """Pure PP 2, one microbatch: stage 0 computes and sends, stage 1 receives and
    computes; the pair's latency takes `factor` times as long from `slow_from`."""
    rows, t = [], 0.0
    for step in range(n_steps):
        lat = 0.02 * (factor if step >= slow_from else 1.0)
        rows += [(0, 0, 0, step, "forward-compute", t, 0.1, 0),
                 (0, 0, 0, step, "forward-send", t + 0.1, lat, 0),
                 (1, 0, 1, step, "forward-recv", t + 0.1, lat, 0),
                 (1, 0, 1, step, "forward-compute", t + 0.1 + lat, 0.1, 0)]
        t += 0.2 + lat + 0.001
    return pd.DataFrame(rows, columns=["rank", "dp_rank", "stage", "step", "optype",
                                       "start_ts", "duration", "seq_id"])


def test_a_pipeline_link_is_placed_by_its_pairs():
    trace = _pp2_trace(10, slow_from=5)
    lt = link_times(trace, dp=1, pp=2)
    assert set(lt["what"]) == {"p2p"} and set(lt["link"]) == {"stage 0-1 link, DP rank 0"}
    ot = over_time(trace, dp=1, pp=2)
    assert ot.change.first_step == 5
    assert [c.ranks for c in ot.links] == [(0, 1)]
    assert "stage 0-1 link, DP rank 0" in ot.note()


def _rule(trace: pd.DataFrame, dp: int, pp: int, board_findings=()):
    from stragglerlab.analysis.detectors.base import Run
    from stragglerlab.analysis.detectors.whatif_rules import Board
    from stragglerlab.analysis.detectors.whatif_rules.job_wide import rule
    from stragglerlab.analysis.detectors.whatif_signals import Signals

    run = Run(trace, JobMeta(dp_size=dp, pp_size=pp), "synthetic", testbed=True)
    s = Signals(run=run, evidence=None, config=WhatIfDetectorConfig())
    return rule(s, Board(findings=list(board_findings)))


def test_the_rule_names_the_change_its_window_and_its_kind():
    found = _rule(_dp_trace(4, 12, slow_from=6, slow_to=9), 4, 1)
    assert len(found) == 1
    f = found[0]
    assert f.root_cause is RootCause.JOB_WIDE_COMM and f.ranks == []
    assert (f.first_step, f.last_step) == (6, 9)
    assert f.detail["job_wide_ratio"] >= 1.5 and "to step 9" in f.detail["note"]
    # The pipeline's one link: named with both its ends.
    pp = _rule(_pp2_trace(10, slow_from=5), 1, 2)
    assert [r.rank for r in pp[0].ranks] == [0, 1] and pp[0].first_step == 5
    # A compute change every rank shares.
    comp = _rule(_dp_trace(2, 10, slow_from=4, factor=1.0, compute_factor=3.0), 2, 1)
    assert comp[0].root_cause is RootCause.JOB_WIDE_COMPUTE


def test_the_rule_stays_quiet_on_clean_jitter_and_under_its_threshold():
    assert _rule(_dp_trace(4, 12), 4, 1) == []
    # A reduce-scatter 1.3x as long moves the 0.17 s step by about 1.09x: under 1.2.
    mild = _dp_trace(4, 12, slow_from=6, factor=1.3)
    steps, sec = step_times(mild)
    assert change_point(steps, sec).factor < 1.2 and _rule(mild, 4, 1) == []


def test_the_arbitration_runs_it_only_where_nothing_across_ranks_was_named(monkeypatch):
    import sys
    import types

    from stragglerlab.analysis.detectors.base import Run
    from stragglerlab.analysis.detectors.whatif_arbitration import (
        PRECEDENCE,
        Entry,
        Settle,
        arbitrate,
    )
    from stragglerlab.analysis.detectors.whatif_signals import Signals
    from stragglerlab.run.findings import Finding, RankRef

    assert PRECEDENCE[-1] == Entry(rule="job_wide", settle=Settle.ADD, across_ranks=False)
    link = Finding([RankRef(1, 1, 0)], 6, 11, RootCause.NET_THROTTLE, confidence=1.0)
    fake = types.ModuleType("fake_link")
    fake.rule = lambda s, board: [link]
    monkeypatch.setitem(sys.modules,
                        "stragglerlab.analysis.detectors.whatif_rules.fake_link", fake)
    run = Run(_dp_trace(4, 12, slow_from=6), JobMeta(dp_size=4, pp_size=1), "s", testbed=True)
    s = Signals(run=run, evidence=None, config=WhatIfDetectorConfig())
    alone = (Entry(rule="job_wide", settle=Settle.ADD),)
    assert [f.root_cause for f in arbitrate(s, alone)] == [RootCause.JOB_WIDE_COMM]
    after_link = (Entry(rule="fake_link", settle=Settle.ADD), *alone)
    assert arbitrate(s, after_link) == [link]


def test_a_failed_run_gets_no_job_wide_finding():
    """The rule's declared exclusion: the arbitration does not run it on a failed run."""
    from stragglerlab.analysis.detectors.base import Run
    from stragglerlab.analysis.detectors.whatif_arbitration import Entry, Settle, arbitrate
    from stragglerlab.analysis.detectors.whatif_signals import Signals

    table = (Entry(rule="job_wide", settle=Settle.ADD),)
    for outcome, found in (("failed", []), ("ok", [RootCause.JOB_WIDE_COMM])):
        run = Run(_dp_trace(4, 12, slow_from=6), JobMeta(dp_size=4, pp_size=1), "s",
                  outcome=outcome)
        s = Signals(run=run, evidence=None, config=WhatIfDetectorConfig())
        assert [f.root_cause for f in arbitrate(s, table)] == found


def test_a_collective_kinds_added_time_on_every_rank_is_its_least_over_ranks():
    from stragglerlab.analysis.over_time import collective_changes

    # Every member's reduce-scatter 1.6x from step 6: 0.03 s a step on every rank.
    got = collective_changes(_dp_trace(4, 12, slow_from=6, factor=1.6))
    assert [c.kind for c in got] == ["grads-reduce-scatter"]
    c = got[0]
    assert (c.first_step, c.last_step, c.n_steps) == (6, 11, 6)
    assert c.added_s == pytest.approx(0.03, rel=0.1)
    assert c.share == pytest.approx(0.03 / 0.17, rel=0.1)
    assert c.note().startswith("from step 6 to step 11, grads-reduce-scatter takes 1.6x")
    # Peers waiting in it for one slow rank: the slow rank itself does not wait, so the
    # least time over ranks, and so the statistic, does not move.
    waiting = _dp_trace(4, 12)
    rs = (waiting["optype"] == "grads-reduce-scatter") & (waiting["step"] >= 6) \
        & (waiting["rank"] != 3)
    waiting.loc[rs, "duration"] += 0.2
    assert collective_changes(waiting) == []
    assert collective_changes(_dp_trace(4, 12)) == []


def test_the_rule_names_a_collective_change_the_step_ratio_is_too_diluted_for():
    # Compute dominates: the step moves under job_wide_ratio, the kind adds 18 % of a step.
    diluted = _dp_trace(4, 12, slow_from=6, factor=1.6)
    steps, sec = step_times(diluted)
    assert change_point(steps, sec).factor < WhatIfDetectorConfig().job_wide_ratio
    f, = _rule(diluted, 4, 1)
    assert f.root_cause is RootCause.JOB_WIDE_COMM and (f.first_step, f.last_step) == (6, 11)
    assert f.detail["job_wide_kind_share"] == pytest.approx(0.18, abs=0.02)
    assert f.detail["note"].startswith("from step 6 to step 11, grads-reduce-scatter")
    assert f.detail["note"].endswith("a shared link or switch, not a straggler")
    # Under its threshold (a kind 1.6x as long adding 3 % of a step): nothing.
    small = _dp_trace(4, 12, slow_from=6, factor=1.6)
    small.loc[small["optype"] == "forward-compute", "duration"] *= 10
    assert _rule(_rescaled(small), 4, 1) == []


def _rescaled(trace: pd.DataFrame) -> pd.DataFrame:
    """The ops laid end to end again per rank after their durations changed."""
    out = trace.sort_values(["rank", "step", "start_ts"]).copy()
    out["start_ts"] = out.groupby("rank")["duration"].cumsum() - out["duration"]
    return out


def test_a_collective_that_moved_only_by_waiting_is_not_communication():
    # From step 6 the ranks take turns arriving last (a host whose speed drifts): every
    # other rank waits 0.2 s longer in the reduce-scatter, so every rank's own time of it
    # moves, but the last arrival's, the transfer, does not.
    trace = _dp_trace(4, 12)
    late = (trace["step"] % 4).to_numpy()
    waits = (trace["optype"] == "grads-reduce-scatter").to_numpy() \
        & (trace["step"] >= 6).to_numpy() & (trace["rank"].to_numpy() != late)
    trace.loc[waits, "duration"] += 0.2
    trace = _rescaled(trace)
    ot = over_time(trace, dp=4, pp=1)
    assert ot.change.first_step == 6 and ot.kinds[0].kind == "grads-reduce-scatter"
    assert ot.kinds[0].comm and ot.kinds[0].every_rank
    assert ot.kinds[0].transfer_ratio == pytest.approx(1.0, abs=0.1)
    assert not ot.comm and "its transfer not (waiting on compute)" in ot.note()
    assert all(f.root_cause is not RootCause.JOB_WIDE_COMM for f in _rule(trace, 4, 1))
    # The ring every member waits on moves the transfer itself: communication.
    ring = over_time(_dp_trace(4, 12, slow_from=6), dp=4, pp=1)
    assert ring.comm and ring.kinds[0].transfer_ratio == pytest.approx(8.0, rel=0.1)


def test_a_pipeline_transfer_is_communication_only_where_it_adds_its_share_of_a_step():
    # Pairs 1.9x as long from step 5 add 0.018 s a step, 8 % of it: communication where
    # the transfer must add 5 % of a step, compute's change where it must add half.
    from stragglerlab.analysis.over_time import transfer_times

    trace = _pp2_trace(10, slow_from=5, factor=1.9)
    steps = np.unique(trace["step"])
    t = transfer_times(trace, "forward-recv", steps)
    assert t[:5] == pytest.approx(0.02) and t[5:] == pytest.approx(0.038)
    ot = over_time(trace, dp=1, pp=2, transfer_share=0.5)
    assert ot.kinds and ot.kinds[0].comm and not ot.comm
    assert over_time(trace, dp=1, pp=2, transfer_share=0.05).comm


def test_a_window_stands_out_only_over_its_own_noise_over_time():
    from stragglerlab.analysis.over_time import over_own_noise

    rng = np.random.default_rng(5)
    quiet = 1 + rng.normal(0, 0.01, 12)
    quiet[6:] += 0.3                   # a slow device from step 6: far over 0.01
    assert over_own_noise(quiet, 6, 12)
    # Two ranks taking turns on a shared host: a rank's compute over its peer's swings
    # 0.77-1.32, and three steps over 1.1 in a row stand no further than it moves.
    swings = np.array([0.83, 0.97, 1.13, 1.27, 0.77, 0.98, 0.84, 1.31, 1.20, 1.15, 0.86, 1.02])
    assert not over_own_noise(swings, 7, 10)
    assert over_own_noise(swings, 0, 11)        # one step outside: nothing to measure
