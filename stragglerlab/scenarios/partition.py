"""Pipeline stage partition: modelled stage costs and the block split that balances them.

`Scenario.stage_partition()` uses `balanced_partition` by default
(`parallel.partition: balanced`), the way Megatron users account for the loss
layer in the pipeline split; the stage-imbalance fault forces the naive
`even_partition` instead. Pure arithmetic with no project imports, so the
scenario loader can use it while `stragglerlab.scenarios.costmodel` (which re-exports
these names) sizes loaded scenarios on top of it.

    layers = balanced_partition(n_layers=8, pp=4, hidden=64, vocab=65536, tokens=256)
"""

from __future__ import annotations

import enum


class Partition(str, enum.Enum):
    """How blocks are split over pipeline stages when `layers_per_stage` is not given."""

    BALANCED = "balanced"  # minimise the largest modelled stage cost (logit layer included)
    EVEN = "even"  # equal block counts, earlier stages take the remainder (the naive split)


def stage_costs(layers: list[int], hidden: int, vocab: int, tokens: int) -> list[float]:
    """Modelled forward multiply-adds per token of each stage (blocks + last-stage logits)."""
    block = 12 * hidden * hidden + 2 * tokens * hidden  # qkv, proj, 2 MLP matrices + attention
    costs = [n * block for n in layers]
    costs[-1] += hidden * vocab  # the logit layer tied to the embedding
    return costs


def microbatch_costs(layers: list[int], hidden: int, vocab: int, tokens: int,
                     seq_len_sq_sum: float) -> list[float]:
    """Modelled forward multiply-adds of each stage on one microbatch whose attention
    spans `seq_len_sq_sum` (sum of squared sequence lengths, tokens^2): per block
    12 h^2 T for the matrices and 2 h sum(s^2) for attention inside each sequence, plus
    the logit layer on the last stage. With sum(s^2) = T^2 it is `stage_costs` x T, the
    model the partition is sized by (attention over the whole microbatch)."""
    block = 12 * hidden * hidden * tokens + 2 * hidden * seq_len_sq_sum
    costs = [float(n * block) for n in layers]
    costs[-1] += float(hidden * vocab * tokens)
    return costs


def even_partition(n_layers: int, pp: int) -> list[int]:
    """Equal block counts, the first stages taking the remainder."""
    base, extra = divmod(n_layers, pp)
    return [base + (1 if s < extra else 0) for s in range(pp)]


def balanced_partition(n_layers: int, pp: int, hidden: int, vocab: int,
                       tokens: int) -> list[int]:
    """Blocks per stage minimizing the largest modelled stage cost.

    Every block costs the same and only the last stage carries more (the
    logit layer), so the best split gives the last stage k blocks and the
    others an even split of the rest: O(n_layers), exact. Ties go to the even
    split when it is among the best (the split a user expects), else to the
    largest k (the last stage as full as it can be, earlier stages fuller).
    """
    if pp < 1 or n_layers < 0:
        raise ValueError(f"need pp >= 1 and n_layers >= 0, got {pp}, {n_layers}")
    even = even_partition(n_layers, pp)
    if pp == 1:
        return even
    best, best_cost = even, max(stage_costs(even, hidden, vocab, tokens))
    for k in range(n_layers, -1, -1):
        layers = [*even_partition(n_layers - k, pp - 1), k]
        cost = max(stage_costs(layers, hidden, vocab, tokens))
        if cost < best_cost - 1e-9 * max(1.0, best_cost):
            best, best_cost = layers, cost
    return best


def stage_imbalance(layers: list[int], hidden: int, vocab: int, tokens: int) -> float:
    """Largest modelled stage cost over the mean (1.0 = perfectly balanced)."""
    costs = stage_costs(layers, hidden, vocab, tokens)
    return max(costs) / (sum(costs) / len(costs))
