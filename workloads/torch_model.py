"""The model and data of the torch-wrapper workloads (DDP, FSDP, pipelining).

A plain residual MLP stack (pre-LayerNorm, hidden -> 4 hidden -> hidden) on
fixed-size batches of random inputs with a regression target: dense matmuls
whose cost does not depend on the data, so every DP rank does the same work
and a straggler is the injected one. The wrappers split it as they like:
DDP replicates it, FSDP shards each block, pipelining cuts it into stages of
consecutive blocks (`stage_blocks`). Our Megatron engine keeps its own tiny
GPT (workloads/model.py); this model has no record_function of ours.

    model = MlpStack(hidden=128, blocks=4, seed=0)
    x, y = batch(step, dp_rank, rows=1024, hidden=128, seed=0)
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """x + W2 gelu(W1 layernorm(x))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class MlpStack(nn.Module):
    """`blocks` residual MLP blocks (a pipeline stage holds a slice of the full stack)."""

    def __init__(self, hidden: int, blocks: int, seed: int, first_block: int = 0) -> None:
        super().__init__()
        # Block i gets the same weights whichever stage holds it (seeded by its index).
        layers = []
        for i in range(first_block, first_block + blocks):
            torch.manual_seed(seed * 1000 + i)
            layers.append(Block(hidden))
        self.blocks = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def stage_blocks(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """(first block, block count) of each pipeline stage: consecutive, as even as can be
    (the first stages take the remainder)."""
    if pp < 1 or n_layers < pp:
        raise ValueError(f"cannot split {n_layers} blocks over {pp} stages")
    base, extra = divmod(n_layers, pp)
    out, first = [], 0
    for s in range(pp):
        count = base + (1 if s < extra else 0)
        out.append((first, count))
        first += count
    return out


def batch(step: int, dp_rank: int, rows: int, hidden: int, seed: int
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (input, target) of one DP rank's step: seeded by (seed, step, dp_rank), so a
    rerun sees the same data and DP ranks see different data."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1009 + dp_rank)
    x = torch.randn(rows, hidden, generator=g)
    return x, torch.tanh(x.flip(-1))


def parameter_fingerprint(model: nn.Module) -> str:
    """The sum of every parameter in float64, all digits: equal on DP replicas after a step."""
    with torch.no_grad():
        total = sum(float(p.double().sum()) for p in model.parameters())
    return f"{total:.17g}"


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error (the pipelining schedule calls it per microbatch)."""
    return torch.nn.functional.mse_loss(out, target)


class ComputeClock:
    """Wall time of the model's Linear layers per step, from forward hooks.

    The faults.json measurement of a slow worker: a Linear's forward holds no
    communication under any of the three wrappers (FSDP all-gathers in the block's
    pre-forward hook, DDP reduces in backward hooks, pipelining sends between
    stages), so the victim's time here over its peers' is its compute slowdown.
    Timing only: nothing is added to the profiler's trace."""

    def __init__(self, model: nn.Module) -> None:
        import time

        self._now = time.perf_counter
        self.seconds = 0.0
        self._starts: dict[int, float] = {}
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                mod.register_forward_pre_hook(self._pre)
                mod.register_forward_hook(self._post)

    def _pre(self, mod, _args) -> None:
        self._starts[id(mod)] = self._now()

    def _post(self, mod, _args, _out) -> None:
        self.seconds += self._now() - self._starts.pop(id(mod), self._now())

    def take(self) -> float:
        """Seconds since the last take (one step's)."""
        out, self.seconds = self.seconds, 0.0
        return out
