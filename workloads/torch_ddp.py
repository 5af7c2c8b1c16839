"""DDP workload: `torch.nn.parallel.DistributedDataParallel` over dp ranks (pp = 1).

Each rank holds the whole MlpStack (workloads/torch_model.py); DDP all-reduces
the gradients in buckets during backward (gloo on CPU, NCCL on GPUs), then
every rank steps its own Adam. What the profiler sees is DDP's own work: the
bucketed `c10d::allreduce_` calls and the reducer's copies, no range of ours.

    scenario: {workload: ddp, parallel: {dp: 2, pp: 1}, run: {profiler: kineto}}
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from stragglerlab.workloads.torch_model import MlpStack, parameter_fingerprint
from stragglerlab.workloads.torch_rank import TorchRankTrainer


class DdpTrainer(TorchRankTrainer):
    """One DDP rank; its step is the data-parallel one (TorchRankTrainer.train_step), with
    the gradients' norm clipped."""

    def build(self) -> torch.nn.Module:
        m = self.sc.model
        model = MlpStack(m.hidden, m.n_layers, self.sc.run.seed).to(self.device)
        self.model = DistributedDataParallel(model, device_ids=None)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.sc.run.lr)
        self.data = self.step_batches()
        return model

    def fingerprint(self) -> str:
        return parameter_fingerprint(self.model)
