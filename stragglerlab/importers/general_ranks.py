"""The ranks of an unannotated import: which rank each file is, whether the files are one
job's, the ProfilerStep#N steps every rank has (stragglerlab.importers.kineto_general
builds the op model on them), and each rank's role where no layout names it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.errors import InputError
from stragglerlab.importers.chrome import one_trace_per_rank
from stragglerlab.importers.kineto_events import UNRANKED, RankEvents
from stragglerlab.op_model import P2P_KINDS


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


def check_ranks(events: list[RankEvents], notes: list[str]) -> int:
    """The job's world size, after checking one trace per rank, one job, two ranks or more
    and a complete step on each (each rank's own notes join `notes`)."""
    seen = one_trace_per_rank([(e.rank, e.path) for e in events])
    worlds = {e.world for e in events if e.world}
    if len(worlds) > 1:
        raise InputError(f"the files disagree on world_size ({sorted(worlds)}); pass the "
                         "traces of one job only", events[0].path)
    world = worlds.pop() if worlds else max(seen) + 1
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


def common_steps(events: list[RankEvents], notes: list[str]) -> list[int]:
    """The steps every rank has (a note names the steps left out)."""
    sets = {e.rank: set(e.steps) for e in events}
    everyone, union = set.intersection(*sets.values()), set.union(*sets.values())
    if not everyone:
        raise InputError("no ProfilerStep#N that every rank has (steps per rank: "
                         + "; ".join(f"rank {r}: {sorted(s)[:8]}" for r, s in sets.items())
                         + "); the what-if compares ranks within a step, so profile the same "
                         "steps on every rank (one torch.profiler.schedule for all)")
    if everyone != union:
        lacking = {r: sorted(union - s) for r, s in sets.items() if union - s}
        notes.append("kept the steps every rank has, " + ", ".join(map(str, sorted(everyone)))
                     + "; left out the others ("
                     + "; ".join(f"rank {r} lacks {s[:8]}" for r, s in lacking.items()) + ")")
    return sorted(everyone)


def rank_roles(ops: pd.DataFrame) -> np.ndarray:
    """Each row's role where no layout is known: its rank's, the multiset of communication
    kinds (P2P split by peer direction) that most of the rank's steps issue, a tie going to
    the multiset more (rank, step)s of the job issue. Per rank, not per step: a step that
    lost events (a sampled or damaged trace) put a rank in another stage's role for that
    step, and a clean pipeline would read S below 1 (the damaged-trace fuzz tests)."""
    label = np.where(ops["kind"].isin(P2P_KINDS),
                     ops["kind"] + np.where(ops["peer"] > ops["rank"], "+", "-"), ops["kind"])
    sig = pd.Series(label, index=ops.index).groupby([ops["rank"], ops["step"]]).transform(
        lambda s: "|".join(sorted(s)))
    per = pd.DataFrame({"rank": ops["rank"], "step": ops["step"], "sig": sig}) \
        .drop_duplicates(["rank", "step"])
    per["job"] = per["sig"].map(per["sig"].value_counts())
    per["own"] = per.groupby(["rank", "sig"])["step"].transform("size")
    per = per.sort_values(["rank", "own", "job", "sig"], ascending=[True, False, False, True])
    chosen = per.drop_duplicates("rank").set_index("rank")["sig"]
    return pd.factorize(ops["rank"].map(chosen))[0]

