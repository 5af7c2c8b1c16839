"""Pipeline P2P matching: which send/recv belongs to which compute, which are no-ops.

Pure decision logic over one stage's ops (design.md Appendix A), no I/O:

* per direction t in {forward, backward}, the k-th valid recv (send) of type t
  belongs to the k-th t-compute of the stage;
* a recv is a no-op if it starts after the last t-compute started (5e-5 s
  tolerance); a send is a no-op if it ends before the first t-compute ended;
* if the valid count differs from the compute count (first/last stage only),
  it must be 0 or exactly one fewer, and then recvs match from the second compute;
* with virtual stages, a send/recv whose peer model chunk lies outside
  [0, pp*vpp) is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglerlab.util.errors import InputError

NOOP_TOLERANCE_S = 5e-5


@dataclass(frozen=True)
class P2PMatch:
    """Result of matching one P2P stream of one stage to its computes."""

    compute_index: np.ndarray
    """Per op in stream order: index into the stage's t-computes, -1 for a no-op."""

    @property
    def valid(self) -> np.ndarray:
        """Boolean mask of ops that take part in a send/recv pair."""
        return self.compute_index >= 0


def match_stream(
    *,
    is_recv: bool,
    op_start: np.ndarray,
    op_end: np.ndarray,
    compute_start: np.ndarray,
    compute_end: np.ndarray,
    compute_gmc: np.ndarray,
    forward: bool,
    stage: int,
    pp_size: int,
    vpp_size: int,
    where: str,
) -> P2PMatch:
    """Match one P2P stream (ops in stream order) of one stage to that stage's t-computes."""
    n_ops = len(op_start)
    n_compute = len(compute_start)
    if n_ops == 0:
        return P2PMatch(np.zeros(0, dtype=np.int64))
    if n_compute == 0:
        return P2PMatch(np.full(n_ops, -1, dtype=np.int64))
    if is_recv:
        valid = op_start <= compute_start.max() + NOOP_TOLERANCE_S
    else:
        valid = op_end >= compute_end.min() - NOOP_TOLERANCE_S
    n_valid = int(valid.sum())
    index = np.full(n_ops, -1, dtype=np.int64)
    if n_valid == n_compute:
        offset = 0
    elif n_valid == 0:
        return P2PMatch(index)
    elif n_valid == n_compute - 1 and stage in (0, pp_size - 1):
        offset = 1 if is_recv else 0
    else:
        raise InputError(
            f"{where}: stage {stage} has {n_valid} valid {'recv' if is_recv else 'send'} "
            f"ops for {n_compute} {'forward' if forward else 'backward'} computes; a P2P "
            "stream must match its computes one to one (or be one short on the first/last "
            "stage). Check that the trace holds every P2P op of the step."
        )
    index[valid] = np.arange(n_valid) + offset
    if vpp_size > 1:
        # The peer chunk of a forward send / backward recv is the next one, else the previous.
        towards_next = forward != is_recv
        matched = index >= 0
        peer = compute_gmc[index[matched]] + (1 if towards_next else -1)
        out_of_range = (peer < 0) | (peer >= pp_size * vpp_size)
        idx = np.flatnonzero(matched)[out_of_range]
        index[idx] = -1
    return P2PMatch(index)
