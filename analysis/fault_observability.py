"""Whether op-level traces can place a fault, and which ranks they cannot tell from its own
(stragglerlab.analysis.ground_truth reads both into each FaultTruth)."""

from __future__ import annotations

from stragglerlab.run.findings import RootCause
from stragglerlab.scenarios.faults import FaultKind, FaultRecord

UNOBSERVABLE_DELAY = "in-process delay (this kernel has no netem)"
"""The mechanism older net-delay records name: the victim slept inside its traced
collective, so in pure DP every rank's collective lengthened alike."""


def observability(fault: FaultRecord, pp_size: int) -> tuple[bool, str]:
    """Whether op-level traces can place the fault at all, and why not. A record may say
    so itself (`measured.observable`); a net delay slept inside the victim's traced
    collective (the mechanism `UNOBSERVABLE_DELAY` names) has no trace of its own in pure
    DP, where a collective is all the victim's communication."""
    said = fault.measured.get("observable")
    if isinstance(said, bool):
        return said, str(fault.measured.get("observable_note", ""))
    if fault.kind == FaultKind.NET_DELAY.value and pp_size == 1 \
            and fault.measured.get("mechanism") == UNOBSERVABLE_DELAY:
        return False, ("a delay inside the victim's traced collective lengthens every "
                       "rank's collective alike in pure DP")
    return True, ""


TC_BOTH_WAYS = "tc-tbf"
"""The net-throttle mechanism that shapes the victim's veth in both directions."""


def alike_ranks(fault: FaultRecord, world: int) -> frozenset[int]:
    """The fault's ranks and those no op-level trace can tell from them. A link throttled
    both ways in a job of two workers: every byte either sends crosses both workers'
    links, so throttling either end times every op alike, and naming the other end
    places the fault as well as naming the victim (its own ranks otherwise)."""
    own = frozenset(fault_ranks(fault, world))
    if (fault.kind == FaultKind.NET_THROTTLE.value and world == 2
            and fault.measured.get("mechanism") == TC_BOTH_WAYS):
        return frozenset(range(world))
    return own


def fault_ranks(fault: FaultRecord, world: int) -> set[int]:
    """Global ranks a fault record acts on: its targets, or every rank (job-wide)."""
    return {int(t["rank"]) for t in fault.targets} if fault.targets else set(range(world))


LINK_KINDS = frozenset({FaultKind.NET_THROTTLE.value, FaultKind.NET_DELAY.value})
"""Fault kinds that slow a link (what every member of a ring or pipeline waits on)."""


def waited_on_by_all(fault: FaultRecord, dp: int, pp: int) -> bool:
    """Every member of the fault's group waits on it alike, so no peer is faster: a slow
    link in pure DP (every ring step of the ring's collectives crosses it) or on the one
    link of a two-stage pure pipeline. Such a fault shows only over time, against the same
    ops' own earlier steps (design.md, "Over time as well as across ranks")."""
    if fault.kind not in LINK_KINDS:
        return False
    return (pp == 1 and dp >= 2) or (dp == 1 and pp == 2)


def observable_as(fault: FaultRecord, dp: int, pp: int) -> tuple[RootCause, ...]:
    """What a fault can be seen as: its own cause, and `job-wide-comm` where every member
    of its group waits on it (`waited_on_by_all`). A record may list them itself
    (`measured.observable_as`, cause spellings); its own cause always stays."""
    own = RootCause.of_kind(fault.kind)
    said = fault.measured.get("observable_as")
    if isinstance(said, list) and all(isinstance(x, str) for x in said):
        try:
            return tuple(dict.fromkeys([own, *(RootCause(x) for x in said)]))
        except ValueError:
            pass  # a spelling outside the vocabulary: derived below
    if waited_on_by_all(fault, dp, pp):
        return own, RootCause.JOB_WIDE_COMM
    return (own,)
