"""Sequence-length imbalance, and its mitigation: rebalancing sequences across DP ranks.

A workload fault: sequences are drawn from a long-tailed (lognormal) length
distribution and packed into microbatches; attention cost grows with
sum(seq_len^2), so the DP rank that happens to get the long sequences of a
step straggles (paper §5.3: 21.4% of jobs, mean S 1.34). With
`rebalance: true` the step's sequences are instead dealt to DP ranks so that
sum(seq_len^2) is as even as possible (the paper's prototype: +23.9%).
Job-wide (no targets); measured: max/mean of per-DP-rank sum(seq_len^2) per
step, and of per-DP-rank compute time per step, both averaged over steps.

    - kind: seq-imbalance
      params: {mean_seq_len: 48, longtail_sigma: 1.2, rebalance: false}

`length_distribution: uniform` keeps lengths uniform in [1, 2 x mean) instead: what a
scenario's `data.length_distribution: uniform` implies (stragglerlab/scenarios/implied_faults.py),
a milder imbalance the engine runs all the same (paced to sum(seq_len^2)).
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from stragglerlab.injectors.base import Injector
from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.scenarios.scenario_vocab import LengthDistribution
from stragglerlab.util.errors import InputError

VARYING = {d.value for d in LengthDistribution if d is not LengthDistribution.FIXED}
"""Length distributions the fault can run: every one whose lengths vary."""


class SeqImbalance(Injector):
    """Long-tailed packed sequences; optionally rebalanced across DP ranks."""

    kind = FaultKind.SEQ_IMBALANCE
    needs_targets = False

    free_params = frozenset({"rebalance", "implied_by", "length_distribution"})
    known_params = free_params | {"mean_seq_len", "longtail_sigma"}

    def check_params(self) -> None:
        if "mean_seq_len" in self.spec.params:
            self.param("mean_seq_len", lo=1, hi=100_000)
        if "longtail_sigma" in self.spec.params:
            self.param("longtail_sigma", lo=0.0, hi=5.0)
        if self.spec.params.get("length_distribution", "longtail") not in VARYING:
            raise InputError("seq-imbalance: params.length_distribution must be one of "
                             f"{sorted(VARYING)}, got "
                             f"{self.spec.params['length_distribution']!r}", self.where)
        if not isinstance(self.spec.params.get("rebalance", False), bool):
            raise InputError("seq-imbalance: params.rebalance must be true or false, "
                             f"got {self.spec.params['rebalance']!r}", self.where)

    def shape_scenario(self, scenario):
        p = self.spec.params
        data = dataclasses.replace(
            scenario.data,
            length_distribution=LengthDistribution(p.get("length_distribution", "longtail")),
            mean_seq_len=int(p.get("mean_seq_len", scenario.data.mean_seq_len)),
            longtail_sigma=float(p.get("longtail_sigma", scenario.data.longtail_sigma)),
            rebalance_across_dp=bool(p.get("rebalance", False)),
        )
        return dataclasses.replace(scenario, data=data).check(self.where)

    def measure(self, trace: pd.DataFrame, run: dict) -> dict:
        fwd = trace[trace["optype"].astype(str) == "forward-compute"]
        out = {}
        if "seq_len_sq_sum" in fwd and fwd["stage"].nunique():
            first = fwd[fwd["stage"] == fwd["stage"].min()]
            per_rank = first.groupby(["step", "dp_rank"])["seq_len_sq_sum"].sum().unstack()
            out["seq_len_sq_imbalance"] = round(float(
                (per_rank.max(axis=1) / per_rank.mean(axis=1)).mean()), 4)
        compute = trace[trace["optype"].astype(str).str.endswith("-compute")]
        per_rank = compute.groupby(["step", "dp_rank"])["duration"].sum().unstack()
        out["compute_imbalance"] = round(float(
            (per_rank.max(axis=1) / per_rank.mean(axis=1)).mean()), 4)
        return out
