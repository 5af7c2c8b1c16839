"""Pipelining workload: `torch.distributed.pipelining` 1F1B over pp stages, dp replicas.

Rank = stage * dp + dp_rank, as in our engine. Each stage holds consecutive
blocks of the MlpStack (workloads/torch_model.stage_blocks) in a
`PipelineStage` over its pipeline's process group; `Schedule1F1B` runs
`parallel.microbatches` microbatches per step, sending activations and
gradients between stages with the process group's send/recv (gloo on CPU).
After the schedule, the stage's gradients are all-reduced over its DP group
(one flat tensor, like DDP's single bucket) and every rank steps Adam. The
profiler sees the schedule's own P2P ops and the all-reduce; no range of
ours. DP replicas are what lets the what-if idealize a stage: ranks of the
same stage do the same work, so a slow one stands out against its peers.

    scenario: {workload: pipelining, parallel: {dp: 2, pp: 2}, run: {profiler: kineto}}
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

from stragglerlab.workloads.torch_model import (
    MlpStack,
    loss_fn,
    parameter_fingerprint,
    stage_blocks,
)
from stragglerlab.workloads.torch_rank import TorchRankTrainer


class PipeliningTrainer(TorchRankTrainer):
    """One pipeline stage of one DP replica."""

    def build(self) -> torch.nn.Module:
        m, p = self.sc.model, self.sc.parallel
        # Every rank creates every group in the same order (new_group is collective).
        self.pp_group = self.dp_group = None
        for d in range(self.dp):
            g = dist.new_group([s * self.dp + d for s in range(self.pp)], timeout=self.timeout)
            if d == self.dp_rank:
                self.pp_group = g
        for s in range(self.pp):
            g = dist.new_group([s * self.dp + d for d in range(self.dp)], timeout=self.timeout)
            if s == self.stage:
                self.dp_group = g
        first, count = stage_blocks(m.n_layers, self.pp)[self.stage]
        model = MlpStack(m.hidden, count, self.sc.run.seed, first_block=first).to(self.device)
        self.model = model
        self.pipe_stage = PipelineStage(model, self.stage, self.pp, self.device,
                                        group=self.pp_group)
        self.schedule = Schedule1F1B(self.pipe_stage, p.microbatches, loss_fn=loss_fn)
        self.opt = torch.optim.Adam(model.parameters(), lr=self.sc.run.lr)
        self.data = self.step_batches()
        return model

    def train_step(self, step: int) -> float | None:
        x, y = self.data[step]
        last = self.stage == self.pp - 1
        losses: list = []
        if self.stage == 0:
            self.schedule.step(x)
        elif last:
            self.schedule.step(target=y, losses=losses)
        else:
            self.schedule.step()
        if self.dp > 1:
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            flat = torch._utils._flatten_dense_tensors(grads)
            dist.all_reduce(flat, group=self.dp_group)
            flat /= self.dp
            for g, reduced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads),
                                  strict=True):
                g.copy_(reduced)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if last:
            return float(torch.stack([loss.detach() for loss in losses]).mean())
        return None

    def fingerprint(self) -> str:
        return parameter_fingerprint(self.model)
