"""Imbalance a scenario runs without naming it a fault, made an explicit fault.

A scenario can make a job imbalanced outside its `faults` list: an uneven
`parallel.layers_per_stage` (or `partition: even`), a heavy `model.vocab` on the
last stage, or `data.length_distribution` other than fixed. The job runs imbalanced all
the same, so its ground truth must say so, or a detector that names the
imbalance is scored a false positive. `with_implied_faults` appends the fault
the phrasing implies, with `implied_by` naming the setting, so the injector
writes its faults.json record like any other:

* stage imbalance: the partition the job runs (`Scenario.stage_partition`) has a
  modelled heaviest stage (stragglerlab/scenarios/partition.py) at least
  `IMPLIED_STAGE_RATIO` over the mean of the others;
* sequence imbalance: lengths that vary, long-tailed or uniform (with
  `rebalance_across_dp`, the mitigation, which the scorer does not score). Since stop
  46 a varying microbatch is paced to its sum(seq_len^2) (workloads/pacing.py), so
  uniform lengths run imbalanced too, if less.

Nothing is added when the scenario already has a fault of that kind.

    scenario = with_implied_faults(load_scenario("mine", config="my.yaml"))
"""

from __future__ import annotations

import dataclasses

from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.scenarios.partition import stage_costs

IMPLIED_STAGE_RATIO = 1.1
"""Modelled heaviest-stage cost over the others' mean from which a partition is a stage
imbalance. The default model's cost-balanced partitions stay under it (its logit layer
costs ~8 % of the last stage's two blocks); the built-in stage-imbalance fault is 2.1x."""


def stage_ratio(scenario) -> float:
    """The partition's modelled heaviest stage over the mean of the others (1 without PP)."""
    m = scenario.model
    costs = stage_costs(scenario.stage_partition(), m.hidden, m.vocab,
                        scenario.data.tokens_per_microbatch)
    if len(costs) < 2:
        return 1.0
    heavy = max(range(len(costs)), key=costs.__getitem__)
    others = [c for i, c in enumerate(costs) if i != heavy]
    return costs[heavy] / max(sum(others) / len(others), 1e-12)


def implied_faults(scenario) -> list[dict]:
    """The fault mappings the scenario's phrasing implies (module docstring)."""
    kinds = {str(f.get("kind")) for f in scenario.faults if isinstance(f, dict)}
    out = []
    p, d = scenario.parallel, scenario.data
    if FaultKind.STAGE_IMBALANCE.value not in kinds and p.pp > 1 \
            and stage_ratio(scenario) >= IMPLIED_STAGE_RATIO:
        setting = ("parallel.layers_per_stage" if p.layers_per_stage is not None
                   else "parallel.partition" if p.partition.value == "even" else "model.vocab")
        out.append({"kind": FaultKind.STAGE_IMBALANCE.value,
                    "params": {"layers_per_stage": scenario.stage_partition(),
                               "implied_by": setting}})
    if FaultKind.SEQ_IMBALANCE.value not in kinds and d.length_distribution.value != "fixed":
        uniform = d.length_distribution.value == "uniform"
        out.append({"kind": FaultKind.SEQ_IMBALANCE.value,
                    "params": {"mean_seq_len": d.mean_seq_len,
                               "longtail_sigma": d.longtail_sigma,
                               "rebalance": bool(d.rebalance_across_dp),
                               **({"length_distribution": "uniform"} if uniform else {}),
                               "implied_by": "data.length_distribution"}})
    return out


def with_implied_faults(scenario):
    """The scenario with the faults its phrasing implies appended (itself when none)."""
    extra = implied_faults(scenario)
    return dataclasses.replace(scenario, faults=[*scenario.faults, *extra]) if extra \
        else scenario
