"""Stage partitioning imbalance, and its mitigation: re-partitioning the layers.

A workload fault: the scenario's model is split unevenly (`layers_per_stage`,
else evenly by block count, overriding the default cost-balanced partition)
and/or carries a heavy logit layer on the last stage (a large `vocab`), as in
the paper's §5.2 (last stage forward 2.07x, backward 1.41x). With
`rebalance: true` the injector instead re-partitions the blocks so that the
modelled per-stage cost is as even as possible (paper: +9.9% throughput).
Ground truth targets the workers of the modelled heaviest stage; measured:
that stage's forward and backward compute time over the other stages' mean.

    - kind: stage-imbalance
      params: {vocab: 4096, layers_per_stage: [2, 2], rebalance: false}
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from stragglerlab.injectors.base import Injector
from stragglerlab.scenarios.costmodel import Partition, balanced_partition, stage_costs
from stragglerlab.scenarios.faults import FaultKind, FaultRecord, Target
from stragglerlab.util.errors import InputError


class StageImbalance(Injector):
    """Uneven layers per stage / heavy loss layer; optionally re-partitioned."""

    kind = FaultKind.STAGE_IMBALANCE
    needs_targets = False

    free_params = frozenset({"layers_per_stage", "rebalance", "implied_by"})
    known_params = free_params | {"vocab"}

    def check_params(self) -> None:
        p = self.spec.params
        if "vocab" in p:
            self.param("vocab", lo=2, hi=1_000_000)
        layers = p.get("layers_per_stage")
        if layers is not None and (not isinstance(layers, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in layers)):
            raise InputError("stage-imbalance: params.layers_per_stage must be a list of "
                             f"block counts >= 0, one per stage, got {layers!r}", self.where)
        if not isinstance(p.get("rebalance", False), bool):
            raise InputError("stage-imbalance: params.rebalance must be true or false, "
                             f"got {p['rebalance']!r}", self.where)
        self.rebalance = bool(p.get("rebalance", False))
        self.layout: tuple[int, int] | None = None
        self.heaviest = 0

    def shape_scenario(self, scenario):
        model = scenario.model
        if "vocab" in self.spec.params:
            model = dataclasses.replace(model, vocab=int(self.spec.params["vocab"]))
        layers = self.spec.params.get("layers_per_stage")
        pp = scenario.parallel.pp
        if self.rebalance:
            layers = balanced_partition(model.n_layers, pp, model.hidden, model.vocab,
                                        scenario.data.tokens_per_microbatch)
        # The fault is the naive split: without a rebalance the blocks are split evenly
        # by count (the default `balanced` partition would already mitigate it).
        parallel = dataclasses.replace(scenario.parallel, layers_per_stage=layers,
                                       partition=Partition.EVEN)
        shaped = dataclasses.replace(scenario, model=model, parallel=parallel)
        shaped.check(self.where)
        costs = stage_costs(parallel.stage_layers(model.n_layers), model.hidden, model.vocab,
                            scenario.data.tokens_per_microbatch)
        self.heaviest = max(range(pp), key=costs.__getitem__)
        self.layout = (scenario.parallel.dp, pp)
        self.partition = parallel.stage_layers(model.n_layers)
        return shaped

    def requested(self) -> dict:
        out = dict(self.spec.params)
        if self.layout is not None:
            out["layers_per_stage_used"] = self.partition
        return out

    def measure(self, trace: pd.DataFrame, run: dict) -> dict:
        out = {}
        for kind in ("forward", "backward"):
            ops = trace[trace["optype"].astype(str) == f"{kind}-compute"]
            per_stage = ops.groupby("stage")["duration"].mean()
            others = per_stage.drop(self.heaviest)
            if len(others):
                out[f"{kind}_ratio"] = round(float(per_stage[self.heaviest] / others.mean()), 4)
        out["heaviest_stage"] = self.heaviest
        return out

    def record(self, trace, run) -> FaultRecord:
        rec = super().record(trace, run)
        if self.layout is not None:
            dp, _pp = self.layout
            rec.targets = [Target(self.heaviest * dp + d, d, self.heaviest).to_dict()
                           for d in range(dp)]
        return rec
