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
    assert sorted(f.ranks[0].rank for f in general_findings(three)) == [0, 1]
