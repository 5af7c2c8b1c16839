"""The what-if's per-rank and per-DP-rank replays of a job made of replicas, on a few.

    rep = replicas(ops, sched, [gap_ideal, transfer_ideal])   # None where they do not hold
    steps = rep.simulate(pairs, replica=d, keep=mask)          # (n_steps, n_scenarios) s

"Rank r original, every other rank ideal" changes only r's rows, yet simulated on
the whole table it costs the whole job, once per rank: quadratic in the ranks. A
data-parallel job is made of replicas (the ranks of one DP rank: a pipeline's
stages and their tensor-parallel peers; where no layout says so, the ranks that
P2P and the narrower collectives join), and its collectives join one member of
every replica at the same place. Replicas with the same rows, flags and ideal
values are one class (a job has one, or a few: a rank whose kernels did not queue,
a slow host). In such a scenario every replica but r's holds its ideal values,
the same in all of its class, so a class runs alike: a collective's latest
arrival over its members is any one member's, and so is a step's latest end. The
scenario's replica and one replica per class (another one of its own class, where
it has one) then replay the job exactly, bit for bit: the replay adds the same
values in the same order and takes maxima.

`replicas` returns None, and the caller replays the whole table, unless every
condition that argument needs holds: the schedule released no group and split
none over steps; every replica has ranks of the same roles in the same numbers
(a rank's slot: its place in its replica, by role then rank) and rows at the same
(slot, step, k); every group either joins one member of every replica at one
position or stays within one replica with the same members in each; and the
classes (same kind, flags, sizes, waits and given ideal values at every
position) are few enough to gain (MAX_CLASSES, and their lanes fewer than the
replicas).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.general_sim import Schedule, schedule, simulate
from stragglerlab.trace.op_model import P2P_KINDS, STEP_END

MIN_REPLICAS = 3
"""Fewer replicas than this replay on the whole table (two replicas gain nothing)."""
MAX_CLASSES = 8
"""More classes of replicas than this replay on the whole table: each class builds its
own schedule of one lane per class, so the cost grows with the classes squared."""
CHUNK_ELEMENTS = 1 << 21
"""Values per array per pass (rows of the lanes x scenarios)."""
_ALIKE = ("kind", "async", "serial", "wait_k", "in_nelems", "out_nelems")
"""The columns a class of replicas holds the same at every position."""


@dataclass(kw_only=True)
class _Lanes:
    """The replay of the scenarios whose replica is in one class: a schedule of the rows
    of one replica of the class (lane 0, which plays the scenario's replica) and one
    replica of every class (another of its own, where it has one)."""

    sched: Schedule
    """The schedule of the lanes' rows (the table's order)."""
    lane0: np.ndarray
    """Per row of that schedule: lane 0's (plays the scenario's replica)."""
    src: np.ndarray
    """Per row of that schedule: the table's row it is (a class's ideal values for the
    other lanes)."""
    pos: np.ndarray
    """Per row of that schedule: its position."""
    step_end: np.ndarray
    """Per row of that schedule: a step-end row."""


@dataclass(kw_only=True)
class Replicas:
    """A job's replicas, their classes and each class's lanes (see the module doc)."""

    rows: np.ndarray
    """(n_replicas, n_positions): the table's row at each replica's position."""
    slot: np.ndarray
    """(n_positions,): the slot (a rank's place in its replica, by role then rank) at each
    position."""
    replica_of_rank: dict[int, int]
    """Each rank's replica."""
    slot_of_rank: dict[int, int]
    """Each rank's slot."""
    cls: np.ndarray
    """(n_replicas,): each replica's class."""
    lanes: list[_Lanes]
    """Per class, the lanes of its scenarios."""

    def simulate(self, pairs: dict[str, tuple[np.ndarray, np.ndarray]],
                 replica: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """Step times (n_steps, n_scenarios), s, of scenarios in which the positions `keep`
        (n_scenarios, n_positions) of replica `replica` (n_scenarios,) keep their original
        values and every other row takes its ideal. `pairs`: per name ("gap", "transfer",
        and the host parts of stragglerlab.analysis.general_sim.HOST_PARTS) the (original,
        ideal) values per row of the whole table."""
        out = np.empty((self.lanes[0].sched.steps.size, replica.size))
        of = self.cls[replica]
        for c, ln in enumerate(self.lanes):
            at = np.flatnonzero(of == c)
            if at.size:
                out[:, at] = self._simulate(ln, pairs, replica[at], keep[at])
        return out

    def _simulate(self, ln: _Lanes, pairs: dict, replica: np.ndarray, keep: np.ndarray
                  ) -> np.ndarray:
        chunk = max(1, CHUNK_ELEMENTS // max(1, ln.pos.size))
        # every other replica plays its class's ideal, the same in each (replicas())
        others = {name: ideal[ln.src][:, None] for name, (_orig, ideal) in pairs.items()}
        lane0 = ln.lane0[:, None]
        out = []
        for lo in range(0, replica.size, chunk):
            at = self.rows[replica[lo:lo + chunk]][:, ln.pos]  # (m, n_lane_rows)
            k = keep[lo:lo + chunk][:, ln.pos]
            vals = {}
            for name, (orig, ideal) in pairs.items():
                mine = np.where(k, orig[at], ideal[at]).T  # (n_lane_rows, m)
                vals[name] = np.ascontiguousarray(np.where(lane0, mine, others[name]))
            host = {n: v for n, v in vals.items() if n not in ("gap", "transfer")} or None
            out.append(simulate(ln.sched, vals["gap"], vals["transfer"], host,
                                ln.step_end if host else None))
        return np.concatenate(out, axis=1)


def _components(ops: pd.DataFrame, synced: np.ndarray) -> np.ndarray:
    """Per row, its replica's label: its DP rank where the layout gives every rank one;
    else the least rank that the groups inside a replica join it to. Those are its P2P
    groups (a pipeline) and its collectives with fewer ranks than the largest collective
    (tensor-parallel peers, where data parallelism is the widest): the widest are taken
    for the ones across replicas. replicas() checks the partition either way."""
    if "dp_rank" in ops and (ops["dp_rank"].to_numpy() >= 0).all():
        return ops["dp_rank"].to_numpy()
    rank = ops["rank"].to_numpy()
    ranks = np.unique(rank)
    at = np.searchsorted(ranks, rank)
    lab = np.arange(ranks.size)
    members = pd.DataFrame({"g": ops["group"].to_numpy()[synced], "r": at[synced],
                            "p2p": ops["kind"].isin(P2P_KINDS).to_numpy()[synced]}
                           ).drop_duplicates(["g", "r"])
    if members.empty:
        return rank
    size = members.groupby("g")["r"].transform("size").to_numpy()
    p2p = members["p2p"].to_numpy()
    widest = size[~p2p].max() if (~p2p).any() else 0
    inside = members[p2p | (size < widest)]
    if not inside.empty:
        a = inside["r"].to_numpy()
        b = inside.groupby("g")["r"].transform("min").to_numpy()
        while True:  # least label over each component (a pipeline: as many rounds as stages)
            new = lab.copy()
            np.minimum.at(new, a, lab[b])
            np.minimum.at(new, b, lab[a])
            new = new[new]
            if np.array_equal(new, lab):
                break
            lab = new
    return ranks[lab][at]


def replicas(ops: pd.DataFrame, sched: Schedule, ideals: list[np.ndarray]
             ) -> Replicas | None:
    """The job's replicas and their classes (see the module doc), or None. `ops` sorted
    by rank, step, k (as `sched` was built from it); `ideals`: the ideal values per row
    the scenarios use (a class holds each the same in all of its replicas)."""
    if sched.released or sched.split_steps or not len(ops) \
            or not {"group", "role"} <= set(ops.columns):
        return None
    comp = _components(ops, sched.synced)
    reps, rep_idx = np.unique(comp, return_inverse=True)
    n_rep = reps.size
    if n_rep < MIN_REPLICAS:
        return None
    rank, role = ops["rank"].to_numpy(), ops["role"].to_numpy()
    ranks_per = pd.DataFrame({"rep": rep_idx, "role": role, "rank": rank}).drop_duplicates()
    if ranks_per["rank"].duplicated().any():  # a rank in two replicas, or of two roles
        return None
    ranks_per = ranks_per.sort_values(["rep", "role", "rank"], ignore_index=True)
    ranks_per["slot"] = ranks_per.groupby("rep").cumcount()  # its place in its replica
    slot = ranks_per.set_index("rank")["slot"].reindex(rank).to_numpy()
    frame = pd.DataFrame({"rep": rep_idx, "slot": slot, "role": role,
                          "step": ops["step"].to_numpy(), "k": ops["k"].to_numpy(),
                          "row": np.arange(len(ops))})
    frame = frame.sort_values(["rep", "slot", "step", "k"], kind="stable")
    count = np.bincount(frame["rep"].to_numpy(), minlength=n_rep)
    if (count != count[0]).any():
        return None
    n_pos = int(count[0])
    key = frame[["slot", "role", "step", "k"]].to_numpy().reshape(n_rep, n_pos, 4)
    if (key != key[0]).any():
        return None
    rows = frame["row"].to_numpy().reshape(n_rep, n_pos)
    synced = sched.synced[rows]
    if (synced != synced[0]).any():  # a group at a position in one replica, not another
        return None
    pos = np.empty(len(ops), dtype=np.int64)  # each row's position in its replica
    pos[rows] = np.arange(n_pos)
    if not _groups_alike(ops["group"].to_numpy(), sched.synced, rows, rep_idx, pos):
        return None
    cls = _classes(ops, rows, ideals)
    if cls is None:
        return None
    n_cls = int(cls.max()) + 1
    if n_cls + 1 >= n_rep:  # as many lanes as replicas: nothing to gain
        return None
    lanes = []
    for c in range(n_cls):
        mine = np.flatnonzero(cls == c)
        chosen = [mine[0]] + [int(np.flatnonzero(cls == i)[1 if i == c else 0])
                              for i in range(n_cls) if i != c or mine.size > 1]
        ln = _lanes(ops, rows, rep_idx, pos, chosen)
        if ln is None:
            return None
        lanes.append(ln)
    return Replicas(
        rows=rows, slot=key[0][:, 0],
        replica_of_rank=dict(zip(ranks_per["rank"].tolist(), ranks_per["rep"].tolist())),
        slot_of_rank=dict(zip(ranks_per["rank"].tolist(), ranks_per["slot"].tolist())),
        cls=cls, lanes=lanes)


def _classes(ops: pd.DataFrame, rows: np.ndarray, ideals: list[np.ndarray]
             ) -> np.ndarray | None:
    """Each replica's class: replicas with the same _ALIKE columns and ideal values (NaN
    alike) at every position (the synced flags are the same in all: replicas() checks);
    None beyond MAX_CLASSES classes."""
    cols = [pd.factorize(ops["kind"])[0].astype(np.int64)] if "kind" in ops else []
    cols += [ops[c].to_numpy().astype(np.int64) for c in _ALIKE[1:] if c in ops]
    for arr in ideals:
        a = np.asarray(arr, dtype=np.float64)
        cols.append(np.where(np.isnan(a), np.nan, a).view(np.int64))  # one NaN
    cls = np.full(rows.shape[0], -1, dtype=np.int64)
    for c in range(MAX_CLASSES + 1):  # each class: the replicas equal to the first left
        left = np.flatnonzero(cls < 0)
        if not left.size:
            return cls
        at, same = rows[left], np.ones(left.size, bool)
        for col in cols:  # a column at a time: no (replicas x positions x columns) copy
            v = col[at]
            same &= (v == v[0]).all(axis=1)
        cls[left[same]] = c
    return None


def _lanes(ops: pd.DataFrame, rows: np.ndarray, rep_idx: np.ndarray, pos: np.ndarray,
           chosen: list[int]) -> _Lanes | None:
    """The lanes of replicas `chosen` (the first plays the scenario's replica), or None
    where their schedule releases or splits a group; `pos`: each row's position."""
    sel = np.sort(rows[chosen].ravel())
    sub_sched = schedule(ops.iloc[sel].reset_index(drop=True))
    if sub_sched.released or sub_sched.split_steps:
        return None
    return _Lanes(sched=sub_sched, lane0=rep_idx[sel] == chosen[0], src=sel, pos=pos[sel],
                  step_end=ops["kind"].to_numpy()[sel] == STEP_END)


def _groups_alike(group: np.ndarray, synced: np.ndarray, rows: np.ndarray,
                  rep_idx: np.ndarray, pos: np.ndarray) -> bool:
    """Every position's groups either join one member of every replica (the same group
    down the column) or stay within each replica with the same size and the same first
    position in every replica (so the same members); `synced` is the same in every
    replica at every position (the caller checks); `pos`: each row's position."""
    n_rep = rows.shape[0]
    s = np.flatnonzero(synced)
    if not s.size:
        return True
    g = pd.DataFrame({"g": group[s], "rep": rep_idx[s], "pos": pos[s]}).groupby("g")
    stats = pd.DataFrame({"size": g.size(), "reps": g["rep"].nunique(),
                          "first": g["pos"].min(), "last": g["pos"].max()})
    col = np.where(synced[rows], group[rows], -1)
    on = col[0] >= 0
    cg = col[:, on]
    st = stats.reindex(cg.ravel())
    size = st["size"].to_numpy().reshape(cg.shape)
    reps = st["reps"].to_numpy().reshape(cg.shape)
    first = st["first"].to_numpy().reshape(cg.shape)
    last = st["last"].to_numpy().reshape(cg.shape)
    across = (cg == cg[0]).all(0) & (size[0] == n_rep) & (reps[0] == n_rep) \
        & (first[0] == last[0])
    within = (reps == 1).all(0) & (size == size[0]).all(0) & (first == first[0]).all(0)
    return bool((across | within).all())
