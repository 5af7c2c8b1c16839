"""The general what-if's ideal of a pipeline (whatif_general._stage_balance): every stage
computes the mean stage's time, as the paper's ideal pools each compute optype over every
stage; a job that is not a pipeline keeps each role's own ideal."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.whatif_general import whatif_general
from tests.unit.bench_modules import load_benchmark

general_ops_at_dp = load_benchmark("asv_bench/inputs").general_ops_at_dp


def _pipeline(dp: int, pp: int, per_stage: list[float]):
    """An engine-shaped DP x PP op table whose stage p computes per_stage[p] seconds a step
    on each rank, in equal segments (no jitter, no slow rank; a middle stage has more
    segments than the first and the last, which are shorter)."""
    ops = general_ops_at_dp(dp, pp=pp, steps=3)
    rows = ops.groupby(["rank", "step"])["k"].transform("size").to_numpy()
    ops["gap_s"] = np.asarray(per_stage)[ops["stage"].to_numpy()] / rows
    return ops


@pytest.mark.parametrize("dp,pp", [(1, 2), (2, 2), (2, 4)])
def test_a_heavy_stage_is_idealized_to_the_mean_stage(dp, pp):
    """The ideal of a job whose last stage computes twice as long as the others is the job
    whose every stage computes the mean stage's time (whether that is faster depends on the
    schedule: this GPipe-shaped table fills and drains through every stage)."""
    heavy = [0.01] * (pp - 1) + [0.02]
    wi = whatif_general(_pipeline(dp, pp, heavy))
    even = whatif_general(_pipeline(dp, pp, [float(np.mean(heavy))] * pp))
    assert wi.T_ideal == pytest.approx(even.T, rel=1e-9)
    mean = float(np.mean(heavy))
    assert wi.stage_balance == pytest.approx({p: mean / w for p, w in enumerate(heavy)})
    assert even.S == pytest.approx(1.0, abs=1e-9)
    assert even.stage_balance == pytest.approx({p: 1.0 for p in range(pp)})


def test_a_slow_rank_of_a_balanced_pipeline_is_still_its_own():
    ops = general_ops_at_dp(4, pp=2, steps=4, seed=3)  # rank 1 1.5x slow, 5 % jitter
    wi = whatif_general(ops)
    # stage 0 holds the slow rank: its mean rank computes 1.125x stage 1's
    assert wi.stage_balance[0] < 1.0 < wi.stage_balance[1]
    assert wi.top_workers == [1]
    assert wi.S > 1.2


def test_no_pipeline_no_balancing():
    """Stages not joined by P2P (a layout given to a DP job) keep their own ideals, and so
    does a job without a layout."""
    ops = _pipeline(2, 2, [0.01, 0.02])
    ops.loc[ops["kind"].isin(["send", "recv"]), "group"] = -1  # no matched P2P
    wi = whatif_general(ops)
    assert wi.stage_balance == {}
    ops = _pipeline(2, 2, [0.01, 0.02])
    ops["stage"] = ops["dp_rank"] = -1
    wi = whatif_general(ops)
    assert wi.stage_balance == {} and wi.S == pytest.approx(1.0, abs=1e-9)
