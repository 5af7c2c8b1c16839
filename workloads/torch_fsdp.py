"""FSDP workload: `torch.distributed.fsdp.fully_shard` (FSDP2) over dp ranks (pp = 1).

Each block of the MlpStack (workloads/torch_model.py) is its own FSDP unit,
then the root: per step FSDP all-gathers a block's parameter shards before
its forward (and again before its backward), reduce-scatters its gradients
after the backward, and each rank steps Adam on its own shards (DTensors).
Works on CPU with gloo in torch 2.13 (all_gather_into_tensor and
reduce_scatter_tensor are gloo collectives there). The profiler sees FSDP's
own `FSDP::*` ranges and the collectives' `record_param_comms`; no range of
ours.

    scenario: {workload: fsdp, parallel: {dp: 2, pp: 1}, run: {profiler: kineto}}
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from stragglerlab.workloads.torch_model import MlpStack
from stragglerlab.workloads.torch_rank import TorchRankTrainer


class FsdpTrainer(TorchRankTrainer):
    """One FSDP2 rank; its step is the data-parallel one (TorchRankTrainer.train_step)
    without clipping: the global norm of sharded gradients is one more all-reduce, not
    FSDP's own work. Its parameter fingerprint is left out: each rank holds shards, not a
    replica (gathering them would add collectives to the trace)."""

    clip_grads = False

    def build(self) -> torch.nn.Module:
        m = self.sc.model
        model = MlpStack(m.hidden, m.n_layers, self.sc.run.seed).to(self.device)
        # The rank's own device type: fully_shard's default mesh is CUDA wherever CUDA is
        # there, which would put CPU (gloo) ranks on a GPU machine's cuda:0.
        mesh = init_device_mesh(self.device.type, (self.sc.world_size,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=self.sc.run.lr)
        self.data = self.step_batches()
        return model
