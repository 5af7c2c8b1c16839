"""sender_latency_excess: a slow link moves its sender's median pair latency, a pause does not."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.p2p_pairs import p2p_pair_latency, sender_latency_excess
from tests.unit.injector_helpers import p2p_pair, trace_of


def _trace(extra, steps=range(4), dp=2, mbs=4):
    """DP x PP3 forward pairs, receivers waiting; latency 2 ms + extra(step, dp, stage, k)."""
    rows = []
    for step in steps:
        for d in range(dp):
            for stage in (0, 1):
                for k in range(mbs):
                    t0 = step + 0.1 * k + 0.01 * d + 0.001 * stage
                    rows += p2p_pair(step, d, stage, "forward", k, t0 + 0.003, t0,
                                     0.002 + extra(step, d, stage, k))
    return trace_of(rows, dp)


def test_delayed_sender_excess_in_its_window_only():
    # dp 1, stage 1 sends 10 ms late from step 2 on; one 50 ms pause elsewhere.
    def extra(step, d, stage, k):
        if (d, stage) == (1, 1) and step >= 2:
            return 0.010
        return 0.050 if (step, d, stage, k) == (1, 0, 0, 2) else 0.0

    steps = np.arange(4)
    excess = sender_latency_excess(p2p_pair_latency(_trace(extra)), 3, 2, steps)
    assert excess.shape == (3, 2, 4)
    assert excess[1, 1, 2:] == pytest.approx([0.010, 0.010])
    assert excess[1, 1, :2] == pytest.approx([0.0, 0.0])
    # The one-off pause moves one pair of four, not its sender's median.
    assert excess[0, 0, 1] == pytest.approx(0.0)
    # The last stage sends nothing forward: no pairs, NaN.
    assert np.isnan(excess[2]).all()


def test_only_steps_asked_for_and_only_waiting_receivers():
    trace = _trace(lambda step, d, stage, k: 0.02 if step == 3 else 0.0)
    pairs = p2p_pair_latency(trace)
    excess = sender_latency_excess(pairs, 3, 2, np.array([1, 3]))
    assert excess.shape == (3, 2, 2)
    assert excess[:2, :, 1] == pytest.approx(np.zeros((2, 2)))  # all alike: no excess
    late = pairs.assign(receiver_waiting=False)
    assert np.isnan(sender_latency_excess(late, 3, 2, np.array([1, 3]))).all()
