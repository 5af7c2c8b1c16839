"""Distributed-optimizer state of one rank (Megatron / ZeRO-1 style).

The stage's parameters become views of one flat buffer. Each DP rank owns one
contiguous shard of it, keeps the fp32 master copy and Adam moments of that
shard only, gets its shard of the averaged gradients by reduce-scatter, and
the full parameters come back by all-gather at the next step's start.

    opt = ShardedAdam(params, dp, dp_rank, lr, device, skip=tied_copy)
    flat_grad = opt.flat_grad()                      # for the reduce-scatter
    opt.step(shard_grad); opt.flat <- all-gather(opt.master)
"""

from __future__ import annotations

import math

import torch

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


class ShardedAdam:
    """Flat parameter buffer, this rank's shard and Adam on it."""

    def __init__(self, params: list, dp: int, dp_rank: int, lr: float,
                 device: torch.device, skip_in_norm=None) -> None:
        self.params, self.dp, self.lr = params, dp, lr
        self.numel = sum(p.numel() for p in params)
        padded = math.ceil(self.numel / dp) * dp
        self.flat = torch.zeros(padded, device=device)
        norm_mask = torch.ones(padded, device=device)
        offset = 0
        for p in params:
            n = p.numel()
            self.flat[offset:offset + n].copy_(p.data.reshape(-1))
            p.data = self.flat[offset:offset + n].view_as(p)
            if p is skip_in_norm:
                norm_mask[offset:offset + n] = 0  # a tied copy counts once in the grad norm
            offset += n
        norm_mask[self.numel:] = 0
        shard = padded // dp
        lo, hi = dp_rank * shard, (dp_rank + 1) * shard
        self.master = self.flat[lo:hi].clone()
        self.norm_mask = norm_mask[lo:hi]
        self.exp_avg = torch.zeros_like(self.master)
        self.exp_avg_sq = torch.zeros_like(self.master)
        self.steps = 0

    def flat_grad(self) -> torch.Tensor:
        """All parameter grads as one padded flat tensor."""
        flat_grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        return torch.nn.functional.pad(flat_grad, (0, self.flat.numel() - self.numel))

    def local_sq_norm(self, shard_grad: torch.Tensor) -> torch.Tensor:
        """This shard's contribution to the global squared grad norm."""
        return (shard_grad * shard_grad * self.norm_mask).sum()

    def step(self, grad: torch.Tensor) -> None:
        """Adam update of the master shard."""
        b1, b2 = ADAM_BETAS
        self.steps += 1
        self.exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
        self.exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (self.exp_avg_sq / (1 - b2 ** self.steps)).sqrt_().add_(ADAM_EPS)
        self.master.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - b1 ** self.steps))

    def zero_grad(self) -> None:
        """Drop the parameter grads."""
        for p in self.params:
            p.grad = None

    def fingerprint(self, stride: int = 1) -> str:
        """Fingerprint of the full parameters (equal across DP replicas after a gather).

        Two float64 sums (plain and position-weighted) over every `stride`-th
        value: a per-step 1% sample is cheap; a full pass costs milliseconds
        that would show up in the trace as launch delay.
        """
        flat = self.flat.detach()[::stride].double()
        weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
        return f"{float(flat.sum()):.17g}/{float((flat * weights).sum()):.17g}"
