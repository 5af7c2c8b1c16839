"""The checks both Kineto import paths make of a job's per-rank traces, and the one clock
alignment they share (stragglerlab.importers.kineto, the vocabulary path, and
stragglerlab.importers.kineto_general, the general one, both on
stragglerlab.importers.kineto_events' RankEvents):

* ranks: one trace per rank, one job (one world_size), files that name no rank
  numbered by name, at least two ranks where the what-if compares peers, a
  --layout of as many ranks as the world;
* steps: the ProfilerStep#N every rank has (the rest left out with a note, or
  refused where the caller keeps only complete jobs);
* clocks: align_clocks puts every rank on the lowest rank's clock, `none`
  (one clock), `collective` (the median, over the communication both ranks
  took part in, of how much later the lowest rank left it: members of a
  collective leave it together) or `step` (the first common step starts
  together); resolved_align picks the mode of `auto` from the hosts the
  traces name; check_clock_gaps refuses a rank that, once aligned, starts a
  step far from the lowest rank.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from stragglerlab.importers.chrome import one_trace_per_rank
from stragglerlab.importers.kineto_events import UNRANKED, RankEvents
from stragglerlab.importers.layout import Layout
from stragglerlab.util.errors import InputError

CLOCK_GAP_FRACTION = 0.5
"""A step starting further than this share of the median step time from rank 0's is a gap."""
MATCH_TOLERANCE_US = 50.0
"""Clock tolerance (us) when checking that a group's members were in it together..."""
MATCH_TOLERANCE_FRACTION = 0.001
"""... or this share of the median step time, whichever is larger."""


def number_unranked(events: list[RankEvents], notes: list[str]) -> None:
    """Files that name no rank (no distributedInfo, no rank number in the name: older torch
    and tensorboard_trace_handler's `<host>_<pid>.<ts>.pt.trace.json`) are numbered 0..n-1
    in their names' natural order, when no file names one; a mix is refused."""
    missing = [e for e in events if e.rank == UNRANKED]
    if not missing:
        return
    if len(missing) < len(events):
        raise InputError(f"{len(missing)} of {len(events)} files name no rank (no "
                         "distributedInfo and no rank number in the file name) while the "
                         "others do, so their ranks are unknown; rename them rank<N>.json",
                         missing[0].path)

    def natural(e: RankEvents) -> list:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", Path(e.path).name)]

    ordered = sorted(missing, key=natural)
    for i, e in enumerate(ordered):
        e.rank = i
    notes.append(f"no file names its rank (no distributedInfo, no rank number in the file "
                 f"name): ranks 0..{len(events) - 1} are the files in name order "
                 f"({Path(ordered[0].path).name} is rank 0); groups "
                 "and roles come from the communication, not from these numbers")


def check_ranks(events: list[RankEvents], notes: list[str], peers: bool = True) -> int:
    """The job's world size, after checking one trace per rank (none at all is an error)
    and one job (one world_size). peers: also two ranks or more (the what-if over the
    op model compares peers), a note when the traces hold part of the world, and a
    complete step on each rank (each rank's own notes join `notes`)."""
    seen = one_trace_per_rank([(e.rank, e.path) for e in events])
    worlds = {e.world for e in events if e.world}
    if len(worlds) > 1:
        raise InputError(f"the files disagree on world_size ({sorted(worlds)}); pass the "
                         "traces of one job only", events[0].path)
    world = worlds.pop() if worlds else max(seen) + 1
    if not peers:
        return world
    if len(events) < 2:
        raise InputError("one rank's trace only: the what-if compares ranks that do the same "
                         "work and synchronizes them at collectives, so it needs the traces "
                         "of at least two ranks of the job; pass every rank's file (a folder "
                         "or a glob)", events[0].path)
    if world > len(events):
        notes.append(f"the traces hold {len(events)} of the job's {world} ranks "
                     f"({', '.join(map(str, sorted(seen)[:16]))}); the traced ranks are "
                     "analysed as the job (collectives wait for the traced members only)")
    for e in events:
        notes.extend(e.notes)
        if not e.steps:
            raise InputError(f"rank {e.rank} has no complete ProfilerStep#N range; profile "
                             "with a schedule (torch.profiler.schedule) and call prof.step() "
                             "once per training step", e.path)
    return world


def check_layout_world(layout: Layout, world: int, where: str | None = None) -> None:
    """InputError when --layout counts another number of ranks than the traces' world."""
    if layout.world_size != world:
        raise InputError(f"--layout dp={layout.dp},pp={layout.pp},tp={layout.tp} gives "
                         f"{layout.world_size} ranks but the traces' world_size is {world}; "
                         "fix --layout", where)


def common_steps(events: list[RankEvents], notes: list[str],
                 allow_partial: bool = True) -> list[int]:
    """The steps every rank has; where some rank lacks a step another has, a note names
    the steps left out (allow_partial), else an InputError."""
    sets = {e.rank: set(e.steps) for e in events}
    everyone, union = set.intersection(*sets.values()), set.union(*sets.values())
    if not everyone:
        raise InputError("no ProfilerStep#N that every rank has (steps per rank: "
                         + "; ".join(f"rank {r}: {sorted(s)[:8]}" for r, s in sets.items())
                         + "); the what-if compares ranks within a step, so profile the same "
                         "steps on every rank (one torch.profiler.schedule for all)")
    if everyone != union:
        lacking = {r: sorted(union - s) for r, s in sets.items() if union - s}
        said = "; ".join(f"rank {r} lacks {s[:8]}" for r, s in lacking.items())
        if not allow_partial:
            raise InputError(f"ranks miss steps that others have ({said}); use the same "
                             "profiler schedule on every rank, or pass --allow-partial to "
                             "keep the steps every rank has")
        notes.append("kept the steps every rank has, " + ", ".join(map(str, sorted(everyone)))
                     + f"; left out the others ({said})")
    return sorted(everyone)


def match_tolerance_us(step_durations_us: list[float]) -> float:
    """The clock tolerance of a job whose steps took these times (us)."""
    return max(MATCH_TOLERANCE_US, MATCH_TOLERANCE_FRACTION * float(np.median(step_durations_us)))


def resolved_align(hosts: set[str], align: str) -> str:
    """The clock mode of `align`: itself unless `auto`, which is none when every trace
    names the same host (one clock), collective when they name different hosts, and
    `evidence` when some trace names none: the caller then tries the clocks as they are
    against collective, on its own evidence of which holds."""
    if align != "auto":
        return align
    if "" in hosts:
        return "evidence"
    return "none" if len(hosts) == 1 else "collective"


def align_clocks(mode: str, ends: dict[int, dict], first_start: dict[int, float],
                 one_clock: dict[int, float]) -> tuple[str, dict[int, float]]:
    """(mode used, microseconds to add to each rank's times to put it on the lowest rank's
    clock), for mode none, collective or step (module doc), every time in the caller's
    frame:

    * ends: rank -> {communication key -> when the rank left it}, the keys naming
      the same collective on every rank;
    * first_start: rank -> start of its first common step;
    * one_clock: rank -> the offsets when the clocks are one (the caller's frame
      may hold each rank's base time or not).

    collective falls back to step when a rank shares no key with the lowest rank."""
    ranks = sorted(first_start)
    ref = ranks[0]
    if mode == "none":
        return mode, {r: one_clock[r] for r in ranks}
    if mode == "collective":
        mine = ends.get(ref, {})
        if all(mine.keys() & ends.get(r, {}).keys() for r in ranks):
            return mode, {r: float(np.median([mine[k] - e for k, e in ends[r].items()
                                              if k in mine])) for r in ranks}
        mode = "step"
    return mode, {r: first_start[ref] - first_start[r] for r in ranks}


def check_clock_gaps(events: list[RankEvents], steps: list[int],
                     offsets: dict[int, float]) -> None:
    """InputError when, once aligned by `offsets`, a rank starts a common step further than
    CLOCK_GAP_FRACTION of the median step time from the lowest rank's start of it."""
    ref = min(events, key=lambda t: t.rank)
    durations = [e - s for t in events for k in steps for s, e in [t.steps[k]]]
    tol = max(CLOCK_GAP_FRACTION * float(np.median(durations)), 1.0)
    for t in events:
        for k in steps:
            gap = t.steps[k][0] + offsets[t.rank] - ref.steps[k][0] - offsets[ref.rank]
            if abs(gap) > tol:
                raise InputError(
                    f"clock gap: after aligning clocks, rank {t.rank}'s step {k} starts "
                    f"{gap / 1e6:+.4f} s from rank {ref.rank}'s (tolerance {tol / 1e6:.4f} s, "
                    f"half the median step time): its clock jumped or its steps are numbered "
                    "differently; profile all ranks in the same run (try --align step if you "
                    "used --align none)", t.path)
