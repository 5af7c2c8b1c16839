"""The pipeline P2P of one stage: activations sent on, gradients sent back, traced.

Sends go out right after the compute that produced them and recvs are posted right after
the previous compute of their direction, both through `AsyncP2P`'s threads; the stage
blocks only when it needs a tensor. Program order then matches the dependency model
(design.md §4), so launch delays stay small. Each op is traced from post to completion,
so a send's duration includes its peer's lateness.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import torch

from stragglerlab.trace.schema import OpType
from stragglerlab.workloads.p2p import AsyncP2P
from stragglerlab.workloads.schedule import Direction
from stragglerlab.workloads.tracer import Tracer, now


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU), so a traced op ends when its
    work does."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(kw_only=True)
class StageLinks:
    """Sends and posted recvs between this stage and its neighbours of the same DP rank."""

    p2p: AsyncP2P
    """The rank's P2P threads (started inside its network namespace)."""
    tracer: Tracer
    """Where each send and recv is recorded, its end set when it completes."""
    rank: int
    """Global rank (for error messages)."""
    stage: int
    """This rank's pipeline stage."""
    dp: int
    """DP degree: the neighbour of stage s is rank s * dp + dp_rank."""
    dp_rank: int
    """This rank's DP rank."""
    microbatches: int
    """Microbatches per step: no recv is posted past the last."""
    act_shape: tuple[int, int]
    """Shape of an activation (and of its gradient): (tokens per microbatch, hidden)."""
    device: torch.device
    """Where received tensors live."""
    timeout: datetime.timedelta
    """How long a recv may wait before the rank fails."""
    staged: bool = False
    """gloo on a GPU rank: tensors go out and come in through host memory
    (workloads.host_staging)."""
    posted: dict = field(default_factory=dict)
    """(direction, microbatch) -> (buffer, done event) of recvs posted, not yet taken."""

    def _peer(self, stage: int) -> int:
        return stage * self.dp + self.dp_rank

    def send(self, direction: Direction, tensor: torch.Tensor) -> None:
        """Send an activation to the next stage (forward) or a gradient to the previous."""
        fwd = direction is Direction.FORWARD
        peer = self._peer(self.stage + 1 if fwd else self.stage - 1)
        synchronize(self.device)
        row = self.tracer.record(OpType.FORWARD_SEND if fwd else OpType.BACKWARD_SEND, now(),
                                 float("nan"))
        self.p2p.send(tensor.cpu() if self.staged else tensor, peer,
                      lambda t: self.tracer.set_end(row, t))

    def post_recv(self, direction: Direction, mb: int) -> None:
        """Post the recv of microbatch `mb` (once; none past the step's last microbatch)."""
        key = (direction, mb)
        if key in self.posted or mb >= self.microbatches:
            return
        fwd = direction is Direction.FORWARD
        peer = self._peer(self.stage - 1 if fwd else self.stage + 1)
        buf = torch.empty(self.act_shape, device="cpu" if self.staged else self.device)
        row = self.tracer.record(OpType.FORWARD_RECV if fwd else OpType.BACKWARD_RECV, now(),
                                 float("nan"))
        done = self.p2p.recv(buf, peer, lambda t: self.tracer.set_end(row, t))
        self.posted[key] = (buf, done)

    def take_recv(self, direction: Direction, mb: int) -> torch.Tensor:
        """The received tensor of microbatch `mb`, waiting for it (posting it if needed)."""
        self.post_recv(direction, mb)
        buf, done = self.posted.pop((direction, mb))
        deadline = now() + self.timeout.total_seconds()
        while not done.wait(0.05):
            if self.p2p.error is not None or now() > deadline:
                raise RuntimeError(f"rank {self.rank}: {direction.value} recv of microbatch "
                                   f"{mb} failed: {self.p2p.error or 'timed out'}")
        return buf.to(self.device) if self.staged else buf
