"""Collectives of a gloo rank whose tensors live on a GPU, staged through host memory.

Several ranks on one GPU cannot use NCCL (it refuses two ranks on one device), so they
compute on the shared GPU and communicate with gloo over host copies: each collective
copies its GPU tensors to the host, runs there, and copies the result back. Off
(`staged=False`, a CPU rank or an NCCL rank), each call is the plain collective.

    comm = HostStaged(staged=backend == "gloo" and device.type == "cuda")
    comm.all_reduce(sq)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

# torch 2.13 renamed the flat collectives (*_into_tensor/*_tensor -> *_single) and
# deprecated the old names; `train` extra admits torch >= 2.4, so take whichever exists.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                          or dist.reduce_scatter_tensor)


@dataclass(frozen=True, kw_only=True)
class HostStaged:
    """The rank's collectives, through host memory when its tensors are on a GPU and
    its backend is gloo."""

    staged: bool
    """Copy GPU tensors to the host before each collective and back after it."""

    def host(self, t: torch.Tensor) -> torch.Tensor:
        """What the backend is given for `t`: a host copy when staged, else `t`."""
        return t.cpu() if self.staged else t

    def all_reduce(self, t: torch.Tensor, group=None) -> None:
        h = self.host(t)
        dist.all_reduce(h, group=group)
        if h is not t:
            t.copy_(h)

    def all_gather_single(self, out: torch.Tensor, inp: torch.Tensor, group=None) -> None:
        self._into(_all_gather_single, out, inp, group)

    def reduce_scatter_single(self, out: torch.Tensor, inp: torch.Tensor, group=None) -> None:
        self._into(_reduce_scatter_single, out, inp, group)

    def _into(self, collective, out: torch.Tensor, inp: torch.Tensor, group) -> None:
        """`collective(out, inp)` on host copies, the result copied back into `out`."""
        h = self.host(out)
        collective(h, self.host(inp), group=group)
        if h is not out:
            out.copy_(h)
