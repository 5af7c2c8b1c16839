"""Findings of the whatif detector on an unannotated import (analysis/general_findings.py)."""

from __future__ import annotations

import dataclasses

import numpy as np

from stragglerlab.analysis.general_findings import general_findings
from stragglerlab.analysis.whatif_general import whatif_general
from tests.unit.bench_modules import load_benchmark

general_ops_at_dp = load_benchmark("asv_bench/inputs").general_ops_at_dp


def _summary(slow_rank: int):
    """The summary of a DP 2 x PP 2 job whose `slow_rank` computes 1.6x (the synthetic
    table's times are not re-laid, so the verdict is forced past the gate)."""
    ops = general_ops_at_dp(2, pp=2, steps=6)
    ops["gap_s"] = np.where(ops["rank"] == slow_rank, 0.016, 0.01)
    return whatif_general(ops, force=True).summary()


def test_one_slow_rank_is_named():
    found = general_findings(_summary(2))
    assert [f.ranks[0].rank for f in found] == [2]
    assert found[0].root_cause.value == "slow-worker"


def test_an_excess_every_rank_carries_alike_names_nobody():
    # A loaded host descheduling each rank in turn: each rank alone left original recovers
    # most of the excess (a clean 2-rank FSDP run read S 1.146, ranks 1.087 and 1.093).
    s = _summary(2)
    two = dataclasses.replace(s, S=1.146, by_rank={0: 1.087, 1: 1.093})
    assert general_findings(two) == []
    # the same with a third rank that carries none of it: two stragglers, both named
    three = dataclasses.replace(s, S=1.146, by_rank={0: 1.087, 1: 1.093, 2: 1.0})
    assert sorted(r.rank for f in general_findings(three) for r in f.ranks) == [0, 1]


def test_every_dp_rank_of_one_stage_is_a_heavy_stage():
    # stage 1 of DP 2 x PP 2 (ranks 2 and 3) carries the excess alike, in compute: the
    # stage, not two workers (the ideal loads every stage evenly)
    s = _summary(2)
    heavy = dataclasses.replace(s, S=1.2, by_rank={0: 1.0, 1: 1.01, 2: 1.19, 3: 1.18},
                                by_kind={"compute": 1.18, "send": 1.01})
    found = general_findings(heavy)
    assert len(found) == 1 and found[0].root_cause.value == "stage-imbalance"
    assert sorted(r.rank for r in found[0].ranks) == [2, 3]
    assert {r.stage for r in found[0].ranks} == {1}
    # the same ranks in a communication kind: each is named for its link
    slow_link = dataclasses.replace(heavy, by_kind={"compute": 1.01, "send": 1.18})
    assert [f.root_cause.value for f in general_findings(slow_link)] == ["net-throttle"] * 2
    # one rank of two stages of one rank each (DP 1): a slow worker
    ops = general_ops_at_dp(1, pp=2, steps=6)
    ops["gap_s"] = np.where(ops["rank"] == 1, 0.016, 0.01)
    pp = dataclasses.replace(whatif_general(ops, force=True).summary(), S=1.2,
                             by_rank={0: 1.0, 1: 1.19}, by_kind={"compute": 1.18})
    assert [f.root_cause.value for f in general_findings(pp)] == ["slow-worker"]
