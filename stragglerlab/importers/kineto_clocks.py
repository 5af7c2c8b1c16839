"""Clocks of per-rank Kineto traces: the offset that puts each rank on rank 0's clock, and
the check that, once aligned, every rank starts each common step near rank 0's
(stragglerlab.importers.kineto's `align` modes).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from stragglerlab.errors import InputError
from stragglerlab.schema import OpType


class RankTimes(Protocol):
    """What the clock checks read of one rank's trace (stragglerlab.importers.kineto's
    RankTrace has it): times in microseconds on the rank's own clock. A protocol, so that
    this module needs nothing of the reader that builds it."""

    path: str
    rank: int
    host: str
    base_us: float
    steps: dict[int, tuple[float, float]]
    ops: list[tuple[str, float, float, int]]

CLOCK_GAP_FRACTION = 0.5
"""A step starting further than this share of the median step time from rank 0's is a gap."""
MATCH_TOLERANCE_US = 50.0
"""Clock tolerance (us) when checking that a group's members were in it together..."""
MATCH_TOLERANCE_FRACTION = 0.001
"""... or this share of the median step time, whichever is larger."""


def match_tolerance_us(step_durations_us: list[float]) -> float:
    """The clock tolerance of a job whose steps took these times (us)."""
    return max(MATCH_TOLERANCE_US, MATCH_TOLERANCE_FRACTION * float(np.median(step_durations_us)))


def clip_ends(t: RankTimes, steps: list[int]) -> dict[int, float]:
    """End of the first optimizer-clip-main-grad of each common step on one rank."""
    ends: dict[int, float] = {}
    clip = OpType.OPTIMIZER_CLIP_MAIN_GRAD.value
    for k in steps:
        s0, s1 = t.steps[k]
        hits = [end for name, start, end, _ in t.ops if name == clip and s0 <= start <= s1]
        if hits:
            ends[k] = min(hits)
    return ends


def clock_offsets(traces: list[RankTimes], steps: list[int], align: str) -> tuple[str, dict]:
    """(mode used, microseconds to add to each rank's ts to put it on rank 0's clock).
    `auto`: none when every trace names one host, collective when they name several; where
    a trace names none, collective only if the clip all-reduce's members, which leave it
    together, end further apart than match_tolerance_us on the clocks as they are, else none
    (stragglerlab.importers.general_groups decides alike)."""
    ref = min(traces, key=lambda t: t.rank)
    if align == "auto":
        hosts = {t.host for t in traces}
        if "" in hosts:
            mode, off = clock_offsets(traces, steps, "collective")
            tol = match_tolerance_us([e - s for t in traces for k in steps
                                      for s, e in [t.steps[k]]])
            none = clock_offsets(traces, steps, "none")
            if mode == "collective" and any(abs(off[r] - none[1][r]) > tol for r in off):
                return mode, off
            return none  # one clock explains the ends (or nothing to test it on)
        align = "none" if len(hosts) == 1 else "collective"
    if align == "none":
        return align, {t.rank: t.base_us - ref.base_us for t in traces}
    if align == "collective":
        ends = {t.rank: clip_ends(t, steps) for t in traces}
        if all(set(ends[ref.rank]) & set(e) for e in ends.values()):
            return align, {t.rank: float(np.median([ends[ref.rank][k] - e for k, e in
                                                    ends[t.rank].items() if k in ends[ref.rank]]))
                           for t in traces}
        align = "step"  # no clip op to align on
    first = steps[0]
    return align, {t.rank: ref.steps[first][0] - t.steps[first][0] for t in traces}


def check_clock_gaps(traces: list[RankTimes], steps: list[int],
                     offsets: dict[int, float]) -> None:
    """InputError when, once aligned by `offsets`, a rank starts a common step further than
    CLOCK_GAP_FRACTION of the median step time from rank 0's start of it."""
    ref = min(traces, key=lambda t: t.rank)
    durations = [e - s for t in traces for k in steps for s, e in [t.steps[k]]]
    tol = max(CLOCK_GAP_FRACTION * float(np.median(durations)), 1.0)
    for t in traces:
        for k in steps:
            gap = t.steps[k][0] + offsets[t.rank] - ref.steps[k][0] - offsets[ref.rank]
            if abs(gap) > tol:
                raise InputError(
                    f"clock gap: after aligning clocks, rank {t.rank}'s step {k} starts "
                    f"{gap / 1e6:+.4f} s from rank {ref.rank}'s (tolerance {tol / 1e6:.4f} s, "
                    f"half the median step time): its clock jumped or its steps are numbered "
                    "differently; profile all ranks in the same run (try --align step if you "
                    "used --align none)", t.path)
