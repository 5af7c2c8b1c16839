"""Pipeline schedules as pure decision logic: which action a stage takes next.

`one_f_one_b(stage, pp_size, n_microbatches)` is Megatron's non-interleaved
1F1B schedule (`forward_backward_pipelining_without_interleaving`): per stage

* warmup: min(pp_size - 1 - stage, n_microbatches) forwards, each as
  recv-forward, forward, send-forward;
* steady state: one forward and one backward per remaining microbatch, joined
  by the combined P2P ops send-forward-recv-backward and
  send-backward-recv-forward (one batched exchange each);
* cooldown: the backwards left over from warmup, each as recv-backward,
  backward, send-backward.

P2P actions that would cross a pipeline end are left out: the first stage never
receives a forward or sends a backward, the last stage never sends a forward or
receives a backward (a combined op shrinks to its remaining half). No torch, no
I/O: the synthetic trace generator and the real torch workload both walk these
actions.

    from stragglerlab.workloads.schedule import one_f_one_b
    for action in one_f_one_b(stage=1, pp_size=4, n_microbatches=8):
        print(action)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ActionKind(enum.Enum):
    """What one schedule step does."""

    FORWARD = "forward"
    BACKWARD = "backward"
    RECV_FORWARD = "recv-forward"
    SEND_FORWARD = "send-forward"
    RECV_BACKWARD = "recv-backward"
    SEND_BACKWARD = "send-backward"
    SEND_FORWARD_RECV_BACKWARD = "send-forward-recv-backward"
    SEND_BACKWARD_RECV_FORWARD = "send-backward-recv-forward"


class Direction(enum.Enum):
    """Which way a pipeline tensor travels: activations forward, gradients backward."""

    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True)
class P2PHalf:
    """One send or one receive of a P2P action (a combined op has two)."""

    direction: Direction
    """Activations (FORWARD, to stage + 1) or gradients (BACKWARD, to stage - 1)."""
    is_send: bool
    """True for the sending side, False for the receiving side."""
    microbatch: int
    """Microbatch whose tensor is transferred."""

    def peer_stage(self, stage: int) -> int:
        """The stage on the other end of this half."""
        towards_next = (self.direction is Direction.FORWARD) == self.is_send
        return stage + 1 if towards_next else stage - 1


@dataclass(frozen=True)
class Action:
    """One step of a stage's schedule."""

    kind: ActionKind
    """What to do."""
    microbatch: int
    """Microbatch computed, sent or received (for a combined op: the one sent)."""
    recv_microbatch: int = -1
    """Combined ops only: the microbatch whose tensor is received, else -1."""

    @property
    def is_compute(self) -> bool:
        """True for FORWARD and BACKWARD."""
        return self.kind in (ActionKind.FORWARD, ActionKind.BACKWARD)

    @property
    def halves(self) -> tuple[P2PHalf, ...]:
        """The P2P transfers of this action, sends first; () for compute."""
        f, b, mb, rmb = Direction.FORWARD, Direction.BACKWARD, self.microbatch, self.recv_microbatch
        return {
            ActionKind.FORWARD: (),
            ActionKind.BACKWARD: (),
            ActionKind.RECV_FORWARD: (P2PHalf(f, False, mb),),
            ActionKind.SEND_FORWARD: (P2PHalf(f, True, mb),),
            ActionKind.RECV_BACKWARD: (P2PHalf(b, False, mb),),
            ActionKind.SEND_BACKWARD: (P2PHalf(b, True, mb),),
            ActionKind.SEND_FORWARD_RECV_BACKWARD: (P2PHalf(f, True, mb), P2PHalf(b, False, rmb)),
            ActionKind.SEND_BACKWARD_RECV_FORWARD: (P2PHalf(b, True, mb), P2PHalf(f, False, rmb)),
        }[self.kind]


def warmup_count(stage: int, pp_size: int, n_microbatches: int) -> int:
    """Forwards a stage runs before its first backward (Megatron's num_warmup_microbatches)."""
    return min(pp_size - 1 - stage, n_microbatches)


def one_f_one_b(stage: int, pp_size: int, n_microbatches: int) -> list[Action]:
    """The non-interleaved 1F1B action list of one stage for one training step."""
    if pp_size < 1 or n_microbatches < 1:
        raise ValueError(f"need pp_size >= 1 and n_microbatches >= 1, got {pp_size}, "
                         f"{n_microbatches}")
    if not 0 <= stage < pp_size:
        raise ValueError(f"stage {stage} outside [0, {pp_size})")
    first, last = stage == 0, stage == pp_size - 1
    K = ActionKind
    actions: list[Action] = []

    def add(kind: ActionKind, mb: int, recv_mb: int = -1) -> None:
        actions.append(Action(kind, mb, recv_mb))

    warmup = warmup_count(stage, pp_size, n_microbatches)
    remaining = n_microbatches - warmup
    for mb in range(warmup):
        if not first:
            add(K.RECV_FORWARD, mb)
        add(K.FORWARD, mb)
        if not last:
            add(K.SEND_FORWARD, mb)
    if remaining > 0 and not first:
        add(K.RECV_FORWARD, warmup)
    for i in range(remaining):
        fwd_mb, bwd_mb = warmup + i, i
        add(K.FORWARD, fwd_mb)
        if not last:  # on the last stage both halves would cross the pipeline end
            add(K.SEND_FORWARD_RECV_BACKWARD, fwd_mb, bwd_mb)
        add(K.BACKWARD, bwd_mb)
        if first:
            continue  # the first stage neither sends backward nor receives forward
        if i == remaining - 1:
            add(K.SEND_BACKWARD, bwd_mb)
        else:
            add(K.SEND_BACKWARD_RECV_FORWARD, bwd_mb, fwd_mb + 1)
    for bwd_mb in range(remaining, n_microbatches):
        if not last:
            add(K.RECV_BACKWARD, bwd_mb)
        add(K.BACKWARD, bwd_mb)
        if not first:
            add(K.SEND_BACKWARD, bwd_mb)
    return actions
