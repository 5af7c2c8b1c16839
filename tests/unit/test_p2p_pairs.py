"""sender_window_signals: a delayed sender's pairs stand over its peers'; a pause does not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.method.p2p_pairs import (
    p2p_pair_latency,
    sender_window_signals,
    worker_window_signals,
)
from tests.unit.injector_helpers import p2p_pair, trace_of


def _trace(extra, steps=range(6), dp=2, mbs=4, waiting=lambda step, d, k: True):
    """DP x PP3 forward pairs from stages 0 and 1; latency 2 ms (+ up to 0.4 ms of spread)
    + extra(step, dp, stage, k); waiting(step, dp, k): the recv was posted first."""
    rows = []
    for step in steps:
        for d in range(dp):
            for stage in (0, 1):
                for k in range(mbs):
                    t0 = step + 0.1 * k + 0.01 * d + 0.001 * stage
                    send, recv = (t0 + 0.003, t0) if waiting(step, d, k) else (t0, t0 + 0.001)
                    rows += p2p_pair(step, d, stage, "forward", k, send, recv,
                                     0.002 + 0.0001 * ((k + d + step) % 5)
                                     + extra(step, d, stage, k))
    return trace_of(rows, dp)


def test_delayed_sender_stands_out_in_its_windows_only():
    # dp 1, stage 1 sends 10 ms late from step 3 on; one 50 ms pause on dp 0, stage 0.
    def extra(step, d, stage, k):
        if (d, stage) == (1, 1) and step >= 3:
            return 0.010
        return 0.050 if (step, d, stage, k) == (1, 0, 0, 2) else 0.0

    sig = sender_window_signals(p2p_pair_latency(_trace(extra)), 3, 2, np.arange(6), 3)
    assert sig.share.shape == (3, 2, 4)  # windows starting at steps 0..3
    assert sig.count[1, 1].tolist() == [12, 12, 12, 12]
    assert sig.share[1, 1, 3] == 1.0 and sig.excess_s[1, 1, 3] == pytest.approx(0.010, abs=3e-4)
    assert sig.excess_iqr[1, 1, 3] > 10
    assert sig.share[1, 1, 0] < 0.5  # steps 0-2: before the delay
    # The one-off pause makes one pair of twelve slow, not its sender.
    assert sig.share[0, 0, 0] < 0.5
    # The last stage sends nothing forward: no pairs.
    assert np.isnan(sig.share[2]).all() and (sig.count[2] == 0).all()


def test_reference_is_waiting_pairs_a_sender_counts_all_its_own():
    # Stage 1 of dp 1 is delayed and never waited for: its pairs still count against the
    # others' waiting pairs. Without any waiting pair there is no reference at all.
    def extra(step, d, stage, k):
        return 0.010 if (d, stage) == (1, 1) else 0.0

    trace = _trace(extra, waiting=lambda step, d, k: d == 0)
    sig = sender_window_signals(p2p_pair_latency(trace), 3, 2, np.arange(6), 3)
    assert (sig.share[1, 1] == 1.0).all()
    none = _trace(extra, waiting=lambda step, d, k: False)
    assert np.isnan(sender_window_signals(p2p_pair_latency(none), 3, 2, np.arange(6),
                                          3).share).all()
    # Too short for one window.
    assert sender_window_signals(p2p_pair_latency(trace), 3, 2, np.arange(2), 3).share.size == 0


def test_pairs_not_own_serve_only_as_reference():
    # dp 1, stage 1's pairs are slow (say, its receiver is a slow device): marked not its
    # own, they no longer count for it, and still make the reference of dp 0's pairs.
    def extra(step, d, stage, k):
        return 0.010 if (d, stage) == (1, 1) else 0.0

    pairs = p2p_pair_latency(_trace(extra))
    steps = np.arange(6)
    assert (sender_window_signals(pairs, 3, 2, steps, 3).share[1, 1] == 1.0).all()
    own_ok = ~((pairs["dp_rank"] == 1) & (pairs["sender_stage"] == 1))
    sig = sender_window_signals(pairs, 3, 2, steps, 3, own_ok)
    assert np.isnan(sig.share[1, 1]).all() and (sig.count[1, 1] == 0).all()
    assert (sig.share[1, 0] == 0.0).all()  # dp 0 against dp 1's slow pairs: never over


def test_leave_one_out_quantiles_match_pandas_without_the_member():
    from stragglerlab.method.p2p_pairs import _leave_one_out_quantiles

    rng = np.random.default_rng(3)
    n = 400
    values = np.round(rng.exponential(1.0, n), 2)  # ties included
    group, member = rng.integers(0, 7, n), rng.integers(0, 5, n)
    want_group, want_member = np.repeat(np.arange(8), 5), np.tile(np.arange(5), 8)
    got = _leave_one_out_quantiles(values, group, member, want_group, want_member,
                                   (0.25, 0.5, 0.75))
    frame = pd.DataFrame({"v": values, "g": group, "m": member})
    for i, (g, m) in enumerate(zip(want_group, want_member)):
        rest = frame[(frame["g"] == g) & (frame["m"] != m)]["v"]
        for q, column in zip((0.25, 0.5, 0.75), got):
            if rest.empty:  # group 7 has no values at all
                assert np.isnan(column[i])
            else:
                assert column[i] == pytest.approx(rest.quantile(q), abs=1e-12)


def _pipeline(extra, pp, steps=range(8), mbs=4, waiting=lambda step, s, k: True):
    """Pure PP (dp 1), forward and backward pairs between every neighbour; latency 2 ms
    (+ up to 0.4 ms of spread) + extra(step, sender, receiver, k)."""
    rows = []
    for step in steps:
        for s in range(pp):
            for r in (s - 1, s + 1):
                if not 0 <= r < pp:
                    continue
                direction = "forward" if r > s else "backward"
                for k in range(mbs):
                    t0 = step + 0.1 * k + 0.01 * s + (0.05 if direction == "backward" else 0)
                    send, recv = (t0 + 0.003, t0) if waiting(step, s, k) else (t0, t0 + 0.001)
                    rows += p2p_pair(step, 0, s, direction, k, send, recv,
                                     0.002 + 0.0001 * ((k + s + step) % 5)
                                     + extra(step, s, r, k))
    return trace_of(rows, 1)


def test_worker_test_finds_a_throttled_inner_stage_the_sender_test_misses():
    # A tc throttle on stage 1 of four from step 3 slows every pair through its veth:
    # its sends and its receives (links 0-1 and 1-2), not link 2-3.
    def extra(step, s, r, k):
        return 0.012 if step >= 3 and 1 in (s, r) else 0.0

    pairs = p2p_pair_latency(_pipeline(extra, 4))
    steps = np.arange(8)
    worker = worker_window_signals(pairs, 4, 1, steps, 3)
    assert worker.share.shape == (4, 1, 6)
    assert (worker.share[1, 0, 3:] == 1.0).all() and worker.excess_s[1, 0, 3] > 0.009
    assert worker.share[1, 0, 0] < 0.5  # steps 0-2, before the throttle
    for other in (0, 2, 3):  # their reference holds the victim's slow pairs, or they are clean
        assert (worker.share[other, 0] <= 0.5).all()
    # Half of the other senders' pairs are slow too, so the victim's sends do not stand out
    # of them: why the worker test exists.
    assert (sender_window_signals(pairs, 4, 1, steps, 3).share[1, 0] < 0.85).all()


def test_two_stage_link_against_its_quietest_window():
    # Two stages: every pair passes both ends, so the reference is the run's quietest window.
    def extra(step, s, r, k):
        return 0.012 if step >= 4 else 0.0

    steps = np.arange(8)
    sig = worker_window_signals(p2p_pair_latency(_pipeline(extra, 2)), 2, 1, steps, 3)
    np.testing.assert_array_equal(sig.share[0], sig.share[1])  # the ends are alike
    assert (sig.share[0, 0, 4:] == 1.0).all() and sig.share[0, 0, 0] < 0.5
    # Slow for the whole run: no quiet window, nothing stands out.
    whole = worker_window_signals(p2p_pair_latency(_pipeline(lambda *a: 0.012, 2)), 2, 1,
                                  steps, 3)
    assert (whole.share < 0.5).all()


def test_informative_pairs_keep_a_delay_a_late_receiver_hides():
    # Stage 0 of four delays its forward sends by 10 ms from step 2; stage 1 is busy and
    # posts its recv late for three microbatches of four, which then complete at once.
    def extra(step, s, r, k):
        if (s, r) == (0, 1) and step >= 2:
            return 0.010 if k == 0 else -0.0015  # received at once
        return 0.0

    def waiting(step, s, k):
        return not ((s, step >= 2) == (0, True) and k > 0)

    pairs = p2p_pair_latency(_pipeline(extra, 4, waiting=waiting))
    steps = np.arange(8)
    plain = sender_window_signals(pairs, 4, 1, steps, 3)
    informed = sender_window_signals(pairs, 4, 1, steps, 3, informative=True)
    assert (plain.share[0, 0, 2:] < 0.5).all()
    assert (informed.share[0, 0, 2:] == 1.0).all() and (informed.count[0, 0, 2:] == 3).all()


def test_pooled_windows_match_pandas_over_each_windows_pairs():
    """Per owner and window: the share over the upper quartile (a bool's mean), the median
    excess in IQRs and in seconds and the count, as a pandas groupby over the pairs each
    window holds (a pair counts in every window that holds its step), bit for bit."""
    from stragglerlab.method.p2p_pairs import LinkSignals, _pool_windows

    rng = np.random.default_rng(5)
    for trial in range(40):
        pp, dp, n_steps, window = 3, int(rng.integers(1, 4)), int(rng.integers(1, 12)), \
            int(rng.integers(1, 5))
        n_win = max(n_steps - window + 1, 0)
        n = int(rng.integers(1, 200))
        owner, step_i = rng.integers(0, pp * dp, n), rng.integers(0, n_steps, n)
        latency = np.round(rng.exponential(1.0, n), 2)  # ties included
        q50 = np.where(rng.random(n) < 0.1, np.nan, np.round(rng.exponential(1.0, n), 1))
        q25, q75 = q50 - rng.random(n) * (trial % 2), q50 + rng.random(n)
        waited = rng.random(n) < 0.6 if trial % 3 else None
        got = LinkSignals.empty(pp, dp, n_win)
        _pool_windows(got, owner, step_i, latency, [q25, q50, q75], dp, n_win, window, waited)
        keep = ~np.isnan(q50) & (True if waited is None else waited | (latency > q75))
        pairs = pd.DataFrame({"owner": owner, "step": step_i, "over": latency > q75,
                              "above": latency - q50,
                              "rel": (latency - q50) / np.maximum(q75 - q25, 1e-6)})[keep]
        want = LinkSignals.empty(pp, dp, n_win)
        for w in range(n_win):
            by = pairs[(pairs["step"] >= w) & (pairs["step"] < w + window)].groupby("owner")
            for o, g in by:
                at = (o // dp, o % dp, w)
                want.share[at], want.count[at] = g["over"].mean(), len(g)
                want.excess_iqr[at], want.excess_s[at] = g["rel"].median(), g["above"].median()
        for field in ("share", "excess_iqr", "excess_s", "count"):
            assert np.array_equal(getattr(got, field), getattr(want, field), equal_nan=True)


def test_shared_reference_gives_each_test_its_own_signals():
    """The reference quartiles computed once for all pairs give each signal function, whatever
    its own pairs, the signals it computes alone."""
    from stragglerlab.method.p2p_pairs import PairArrays, reference_quartiles

    def extra(step, d, stage, k):
        return 0.003 if (d, stage) == (1, 0) and step >= 2 else 0.0

    arrays = PairArrays.of(p2p_pair_latency(_trace(extra, dp=3, waiting=lambda s, d, k: k != 2)))
    rng = np.random.default_rng(2)
    for steps in (np.arange(6), np.arange(1, 5)):
        reference = reference_quartiles(arrays, steps, 3, 3)
        for own_ok in (None, rng.random(len(arrays.step)) < 0.7):
            for signals in (sender_window_signals, worker_window_signals):
                alone = signals(arrays, 3, 3, steps, 3, own_ok, informative=True)
                shared = signals(arrays, 3, 3, steps, 3, own_ok, informative=True,
                                 reference=reference)
                for field in ("share", "excess_iqr", "excess_s", "count"):
                    assert np.array_equal(getattr(alone, field), getattr(shared, field),
                                          equal_nan=True)
                assert (alone.count > 0).any()
