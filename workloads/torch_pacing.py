"""Compute pacing for the torch-wrapper workloads: each Linear runs at a fixed device rate.

A GPU runs the same matmul in the same time step after step; a vCPU does not:
on this project's 2-vCPU host the thread CPU time of one and the same 1024 x
256 x 1024 matmul varies with a CV of 6-11 % (idle: min 46, max 69 ms; the
hypervisor's other guests; benchmarks/bench_cpu_noise.py), so two ranks doing
the same work differ by tens of percent from step to step, and the what-if rightly calls that
straggling. Our engine paces each op to its own CPU time over the rank's share
(workloads/pacing.py), which keeps that noise. Here the unit is each
`nn.Linear`, forward and backward, and its target is nominal, the same on
every rank:

    target = pace_margin x FLOPs x rate[forward|backward] / share_now

* FLOPs: 2 x rows x in x out for the forward, twice that for the backward
  (grad input and grad weight);
* rate: core-seconds per FLOP, measured on the job's own Linears during the
  warm-up steps (each rank's median, scaled to its share; the slowest rank's
  taken by all at `settle`, a collective) - the device's speed as this job on
  this host sees it;
* share_now: the rank's CPU share now (the slow-worker injector's lower quota
  while it acts, `cgroup["cores_now"]`), so a victim's Linears are exactly
  `factor` slower;
* pace_margin (`run.pace_margin`): headroom over the warm-up rate; an op that
  still runs past its target is not cut, and is counted (`over_target`);
* x factor_now: without CPU isolation (no quota to cut) a slow worker's
  factor is applied here instead (RankContext.device_factor), a slower device
  as the engine's pacer has one: the Linears, which the ground truth measures,
  take `factor` times their target.

An op that finished early sleeps to its target. Hooks add nothing to the
profiler's trace: a forward pre-hook and hook around the forward; for the
backward, a hook on the output's gradient (the Linear's backward begins) and on
the input's gradient (it ended: grad input and grad weight are one autograd
node, run on this thread for CPU tensors). The Linears hold nearly all of the
MLP stack's FLOPs (torch_model.Block); norms, GELU and the optimizer run unpaced.

    pacer = LinearPacer(model, share=0.9, margin=1.3, cores_now=lambda: None)
    ...warm-up steps...; pacer.settle()   # every rank, after its last warm-up step
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

from stragglerlab.workloads.pacing import agreed_medians
from stragglerlab.workloads.tracer import now


class LinearPacer:
    """Pace every Linear of `model`, forward and backward, to the module doc's target."""

    def __init__(self, model: nn.Module, *, share: float, margin: float,
                 cores_now: Callable[[], float | None],
                 factor_now: Callable[[], float] = lambda: 1.0) -> None:
        self.share, self.margin = share, margin
        self._cores_now, self._factor_now = cores_now, factor_now
        self.rate: dict[str, float] | None = None
        """Core-seconds per FLOP of a forward / backward, once settled (None: warming up)."""
        self._warm: dict[str, list[float]] = {"forward": [], "backward": []}
        self.ops = 0
        """Ops paced so far (after settle)."""
        self.over = 0
        """Paced ops that ran past their target (the margin did not cover them)."""
        self.slept_s = 0.0
        """Seconds slept so far."""
        self._fwd: dict[int, float] = {}
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                mod.register_forward_pre_hook(self._pre)
                mod.register_forward_hook(self._post)

    def settle(self) -> None:
        """End the warm-up: each kind's rate is this rank's median, the largest over the
        process group's ranks when one is up (a collective: every rank calls it)."""
        self.rate = dict(zip(self._warm, agreed_medians(list(self._warm.values())),
                             strict=True))

    def summary(self) -> dict:
        """What pacing did, for the run's record."""
        return {"ops": self.ops, "over_target": self.over, "slept_s": round(self.slept_s, 4),
                "rate_core_s_per_flop": self.rate, "margin": self.margin, "share": self.share,
                "warmup_ops": sum(len(v) for v in self._warm.values())}

    def _finish(self, started: float, flops: float, kind: str) -> None:
        elapsed = now() - started
        share = self._cores_now() or self.share
        if self.rate is None:
            self._warm[kind].append(elapsed * share / flops)
            return
        left = self.margin * flops * self.rate[kind] * self._factor_now() / share - elapsed
        self.ops += 1
        if left > 0:
            time.sleep(left)
            self.slept_s += left
        else:
            self.over += 1

    def _pre(self, mod: nn.Module, args) -> None:
        self._fwd[id(mod)] = now()

    def _post(self, mod: nn.Linear, args, out) -> None:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor):
            return
        flops = 2.0 * (x.numel() // mod.in_features) * mod.in_features * mod.out_features
        started = self._fwd.pop(id(mod), None)
        if started is not None:
            self._finish(started, flops, "forward")
        if (torch.is_grad_enabled() and isinstance(out, torch.Tensor) and out.requires_grad
                and x.requires_grad):
            self._pace_backward(out, x, 2.0 * flops)

    def _pace_backward(self, out: torch.Tensor, x: torch.Tensor, flops: float) -> None:
        """The backward of out = Linear(x): from out's gradient arriving to x's computed."""
        box: list[float] = []

        def opened(grad):
            box.append(now())

        def closed(grad):
            if box:
                self._finish(box.pop(), flops, "backward")

        out.register_hook(opened)
        x.register_hook(closed)
