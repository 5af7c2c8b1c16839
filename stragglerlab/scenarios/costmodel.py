"""Cost models that size the testbed's scenarios: stage partition, slow-worker level, seq gain.

Pure arithmetic (no torch, no Ray), so scenarios are sized and checked in
unit tests and on the command line before any job runs:

* `stage_costs` / `balanced_partition`: modelled forward multiply-adds per
  token of each pipeline stage, and the block partition that minimises the
  largest one. `Scenario.stage_partition()` uses it by default
  (`parallel.partition: balanced`), the way Megatron users account for the
  loss layer in the pipeline split; the stage-imbalance fault forces the
  naive even split instead. They live in `stragglerlab.scenarios.partition` (the
  scenario loader needs them; this module imports the loader) and are
  re-exported here.
* `slow_worker_slowdown` / `slow_worker_factor`: job slowdown of a DP x PP
  1F1B job in which one worker computes `factor` times slower, and the
  inverse, used to size `slow-worker-1..3` for the paper's measured levels;
  `mean_ideal_shortfall`: how far the what-if's mean ideal falls short of such a
  slowdown (why the §6 job needs many microbatches per step).
* `seq_rebalance_gain`: the throughput gain of dealing sequences across DP
  ranks by sum(s^2), from the data generator's own draws and a per-microbatch
  cost a + b * sum(s^2) (`benchmarks/bench_attention.py` measures a and b).

    .venv/bin/python -m stragglerlab.scenarios.costmodel  # sizing of the built-in scenarios
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stragglerlab.scenarios.dataset import rank_microbatches

# re-exported: the partition is part of the cost model
from stragglerlab.scenarios.partition import (
    Partition,
    balanced_partition,
    even_partition,
    stage_costs,
    stage_imbalance,
)
from stragglerlab.scenarios.scenario import DataConfig, Scenario, list_scenarios
from stragglerlab.scenarios.scenario_vocab import LengthDistribution

__all__ = ["COMPUTE_SHARE", "FIXED_S_PER_TOKEN", "PAPER_S6_MEASURED", "SQ_S_PER_TOKEN2",
           "MicrobatchCost", "Partition", "balanced_partition", "even_partition", "main",
           "mean_ideal_shortfall", "seq_rebalance_gain", "slow_worker_factor",
           "slow_worker_slowdown", "stage_costs", "stage_imbalance"]

PAPER_S6_MEASURED = (1.16, 1.40, 2.03)
"""The paper's measured job slowdowns of its three injected slow-worker levels (§6)."""
COMPUTE_SHARE = 0.8
"""Share of a clean step that the 1F1B pipeline's computes span (the rest: DP collectives,
clip, optimizer, untraced CPU work); fitted to the DP 2 x PP 2 slow-worker runs
of `benchmarks/bench_faults.py --repeats 3` (factors 1.4/1.8/2.7 measured 1.23/1.51/2.14:
0.72-0.84)."""


def _check_layout(pp: int, microbatches: int, compute_share: float) -> None:
    if pp < 1 or microbatches < 1:
        raise ValueError(f"pp and microbatches must be >= 1, got {pp}, {microbatches}")
    if not 0.0 < compute_share <= 1.0:
        raise ValueError(f"compute_share must be in (0, 1], got {compute_share}")


def slow_worker_slowdown(factor: float, *, pp: int, microbatches: int,
                         compute_share: float = COMPUTE_SHARE) -> float:
    """Job slowdown when one worker computes `factor` times slower (factor >= 1).

    1F1B: a pipeline with one stage of per-microbatch time f*t and the others t
    takes (pp - 1) * t + m * f * t (the slow stage is the bottleneck) instead of
    (pp - 1 + m) * t; every DP replica waits for the slow one at the DP
    collectives. Only `compute_share` of the clean step is pipeline compute.
    """
    _check_layout(pp, microbatches, compute_share)
    if factor < 1.0:
        raise ValueError(f"factor must be >= 1, got {factor}")
    return 1.0 + compute_share * (factor - 1.0) * microbatches / (microbatches + pp - 1)


def slow_worker_factor(target: float, *, pp: int, microbatches: int,
                       compute_share: float = COMPUTE_SHARE) -> float:
    """The compute slow-down factor that gives job slowdown `target` (inverse of the above)."""
    _check_layout(pp, microbatches, compute_share)
    if target < 1.0:
        raise ValueError(f"target slowdown must be >= 1, got {target}")
    return 1.0 + (target - 1.0) * (microbatches + pp - 1) / (compute_share * microbatches)


def mean_ideal_shortfall(slowdown: float, *, pp: int, microbatches: int, workers: int) -> float:
    """Relative error of the what-if S (mean compute ideal) against a measured `slowdown`
    caused by one slow worker of `workers`, timing noise aside (negative: it falls short).

    The slow worker is 1/workers of every compute type's mean, so the ideal's compute is
    lifted by c (f - 1) / workers while the job's is lifted by c (f - 1) m / (m + pp - 1)
    (`slow_worker_slowdown`); c cancels: the ideal step is (S - 1) (m + pp - 1) /
    (workers m) longer than a clean one, and the estimate S / that falls short by it.
    Many microbatches per step (the paper's trace-AR: 32) shrink it toward (S - 1) / workers.
    """
    _check_layout(pp, microbatches, 1.0)
    if workers < 1 or slowdown < 1.0:
        raise ValueError(f"need workers >= 1 and slowdown >= 1, got {workers}, {slowdown}")
    lift = (slowdown - 1.0) * (microbatches + pp - 1) / (workers * microbatches)
    return 1.0 / (1.0 + lift) - 1.0


FIXED_S_PER_TOKEN = 3.0e-6
"""Per-token time of one block (hidden 32, 2 heads, forward + backward, one thread),
`benchmarks/bench_attention.py --tokens 2048 --hidden 32` (load ~4 on 2 cores; hidden 64:
6.4e-6)."""
SQ_S_PER_TOKEN2 = 4.0e-9
"""Per-token^2 attention time of the same block and run (sum(s^2) term; hidden 64: 6.4e-9)."""


@dataclass(frozen=True, kw_only=True)
class MicrobatchCost:
    """Per-microbatch compute time a + b * sum(s^2) (fitted by benchmarks/bench_attention.py)."""

    fixed_s: float
    """a: the token-proportional part (linear layers, norms), seconds per microbatch."""
    per_sq_token_s: float
    """b: seconds per token^2 of sum(seq_len^2) (attention)."""

    def __post_init__(self) -> None:
        if not (self.fixed_s >= 0 and self.per_sq_token_s >= 0):
            raise ValueError("microbatch cost terms must be >= 0")

    def of(self, seq_lens: list[int]) -> float:
        """Modelled seconds of one microbatch."""
        return self.fixed_s + self.per_sq_token_s * sum(n * n for n in seq_lens)


def seq_rebalance_gain(data: DataConfig, *, vocab: int, max_seq_len: int, dp: int,
                       microbatches: int, steps: int, cost: MicrobatchCost,
                       seed: int = 0) -> tuple[float, float]:
    """(modelled S of the unbalanced job, gain of rebalancing) from the generator's draws.

    Step time = the slowest DP rank's summed microbatch cost (pure DP, the
    ranks wait for each other at the gradient collectives); the ideal step
    has every rank at the mean. gain = mean step(unbalanced) / mean step(rebalanced) - 1.
    """
    steps_t = {}
    for rebalance in (False, True):
        cfg = dataclasses.replace(data, rebalance_across_dp=rebalance)
        worst, mean = 0.0, 0.0
        for step in range(steps):
            per_rank = [sum(cost.of(mb.seq_lens) for mb in rank_microbatches(
                cfg, vocab, max_seq_len, seed, step, r, dp, microbatches)) for r in range(dp)]
            worst += max(per_rank)
            mean += sum(per_rank) / dp
        steps_t[rebalance] = (worst, mean)
    (w0, m0), (w1, _m1) = steps_t[False], steps_t[True]
    return w0 / m0, w0 / w1 - 1.0


def _seq_note(sc: Scenario, params: dict) -> str:
    """Modelled S and rebalancing gain of a seq-imbalance fault (the generator's draws)."""
    d = sc.data
    data = dataclasses.replace(
        d, length_distribution=LengthDistribution.LONGTAIL,
        mean_seq_len=int(params.get("mean_seq_len", d.mean_seq_len)),
        longtail_sigma=float(params.get("longtail_sigma", d.longtail_sigma)))
    cost = MicrobatchCost(fixed_s=FIXED_S_PER_TOKEN * d.tokens_per_microbatch,
                          per_sq_token_s=SQ_S_PER_TOKEN2)
    s, gain = seq_rebalance_gain(data, vocab=sc.model.vocab, max_seq_len=sc.model.max_seq_len,
                                 dp=sc.parallel.dp, microbatches=sc.parallel.microbatches,
                                 steps=sc.run.steps, cost=cost, seed=sc.run.seed)
    return f"; modelled S {s:.2f}, rebalancing gain {100 * gain:+.1f}%"


def main() -> int:
    """Print the partition and the fault sizing of the built-in scenarios."""
    for sc in list_scenarios():
        m, d = sc.model, sc.data
        layers = sc.stage_partition()
        imb = stage_imbalance(layers, m.hidden, m.vocab, d.tokens_per_microbatch)
        line = (f"{sc.name:<22} dp{sc.parallel.dp}-pp{sc.parallel.pp} layers {layers} "
                f"(modelled stage imbalance {imb:.3f})")
        for f in sc.faults:
            params = f.get("params") or {}
            if f.get("kind") == "slow-worker":
                factor = float(params.get("factor", 1.0))
                s = slow_worker_slowdown(factor, pp=sc.parallel.pp,
                                         microbatches=sc.parallel.microbatches)
                short = mean_ideal_shortfall(s, pp=sc.parallel.pp,
                                             microbatches=sc.parallel.microbatches,
                                             workers=sc.parallel.dp * sc.parallel.pp)
                line += (f"; slow worker x{factor:.2f} -> modelled S {s:.2f}, "
                         f"mean-ideal estimate {100 * short:+.1f}%")
            if f.get("kind") == "seq-imbalance" and not params.get("rebalance"):
                line += _seq_note(sc, params)
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
