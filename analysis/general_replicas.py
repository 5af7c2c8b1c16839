"""The what-if's per-rank and per-DP-rank replays of a job made of alike replicas, on two.

    rep = replicas(ops, sched, [gap_ideal, transfer_ideal])   # None where they do not hold
    steps = rep.simulate(pairs, replica=d, keep=mask)          # (n_steps, n_scenarios) s

"Rank r original, every other rank ideal" changes only r's rows, yet simulated on
the whole table it costs the whole job, once per rank: quadratic in the ranks. A
data-parallel job is made of replicas (the ranks one pipeline's P2P links join,
one rank per role) that do the same work, and its collectives join one member of
every replica at the same place. In such a scenario every replica but r's holds
its ideal values, which are the same in every replica (the ideal is taken over
the ranks doing the same work), so they all run alike: a collective's latest
arrival over them is the latest of r's replica and any one of the others, and so
is a step's latest end. Two replicas then replay the job exactly, bit for bit:
the replay adds the same values in the same order and takes maxima.

`replicas` returns None, and the caller replays the whole table, unless every
condition that argument needs holds: the schedule released no group and split
none over steps; every replica has the same roles, one rank each, and the same
rows at the same (role, step, k) with the same kind, flags, sizes and waits;
every group either joins one member of every replica at one position or stays
within one replica with the same members in each; the given ideal values are
the same in every replica.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.general_sim import Schedule, schedule, simulate
from stragglerlab.trace.op_model import P2P_KINDS, STEP_END

MIN_REPLICAS = 3
"""Fewer replicas than this replay on the whole table (two replicas gain nothing)."""
CHUNK_ELEMENTS = 1 << 21
"""Values per array per pass (rows of the two replicas x scenarios)."""
_ALIKE = ("kind", "async", "serial", "wait_k", "in_nelems", "out_nelems")
"""The columns that must be the same at one position in every replica."""


@dataclass(kw_only=True)
class Replicas:
    """A job's alike replicas and the schedule of two of them (see the module doc)."""

    sched: Schedule
    """The schedule of replicas 0 and 1's rows (the table's order)."""
    rows: np.ndarray
    """(n_replicas, n_positions): the table's row at each replica's position."""
    role: np.ndarray
    """(n_positions,): the role at each position."""
    replica_of_rank: dict[int, int]
    """Each rank's replica."""
    role_of_rank: dict[int, int]
    """Each rank's role."""
    lane_a: np.ndarray
    """Per row of the two replicas' schedule: it is replica 0's (the lane that plays the
    scenario's replica); else replica 1's (the lane that plays every other replica)."""
    pos: np.ndarray
    """Per row of the two replicas' schedule: its position."""
    step_end: np.ndarray
    """Per row of the two replicas' schedule: it is a step-end row."""

    def simulate(self, pairs: dict[str, tuple[np.ndarray, np.ndarray]],
                 replica: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """Step times (n_steps, n_scenarios), s, of scenarios in which the positions `keep`
        (n_scenarios, n_positions) of replica `replica` (n_scenarios,) keep their original
        values and every other row takes its ideal. `pairs`: per name ("gap", "transfer",
        and the host parts of stragglerlab.analysis.general_sim.HOST_PARTS) the (original,
        ideal) values per row of the whole table."""
        n_red = self.pos.size
        chunk = max(1, CHUNK_ELEMENTS // max(1, n_red))
        # every replica but the scenario's plays its ideal, the same in each (replicas())
        others = {name: ideal[self.rows[0]][self.pos][:, None]
                  for name, (_orig, ideal) in pairs.items()}
        lane_a = self.lane_a[:, None]
        out = []
        for lo in range(0, replica.size, chunk):
            at = self.rows[replica[lo:lo + chunk]][:, self.pos]  # (m, n_red)
            k = keep[lo:lo + chunk][:, self.pos]
            vals = {}
            for name, (orig, ideal) in pairs.items():
                mine = np.where(k, orig[at], ideal[at]).T  # (n_red, m)
                vals[name] = np.ascontiguousarray(np.where(lane_a, mine, others[name]))
            host = {n: v for n, v in vals.items() if n not in ("gap", "transfer")} or None
            out.append(simulate(self.sched, vals["gap"], vals["transfer"], host,
                                self.step_end if host else None))
        return np.concatenate(out, axis=1) if out else np.zeros((self.sched.steps.size, 0))


def _components(ops: pd.DataFrame) -> np.ndarray:
    """Per row, its replica's label: the least rank its P2P groups join it to."""
    rank = ops["rank"].to_numpy()
    ranks = np.unique(rank)
    p2p = ops["kind"].isin(P2P_KINDS).to_numpy() & (ops["group"].to_numpy() >= 0)
    pairs = pd.DataFrame({"g": ops["group"].to_numpy()[p2p], "r": rank[p2p]}).drop_duplicates()
    edges = pairs.merge(pairs, on="g")[["r_x", "r_y"]].drop_duplicates().to_numpy()
    lab = np.searchsorted(ranks, ranks)
    if edges.size:
        a, b = np.searchsorted(ranks, edges[:, 0]), np.searchsorted(ranks, edges[:, 1])
        while True:  # least label over each component (a pipeline: as many rounds as stages)
            new = lab.copy()
            np.minimum.at(new, a, lab[b])
            new = new[new]
            if np.array_equal(new, lab):
                break
            lab = new
    label = ranks[lab]
    return label[np.searchsorted(ranks, rank)]


def replicas(ops: pd.DataFrame, sched: Schedule, ideals: list[np.ndarray]
             ) -> Replicas | None:
    """The job's alike replicas (see the module doc), or None. `ops` sorted by rank, step,
    k (as `sched` was built from it); `ideals`: the ideal values per row the scenarios use,
    each of which must be the same in every replica."""
    if sched.released or sched.split_steps or not len(ops) \
            or not {"group", "role"} <= set(ops.columns):
        return None
    comp = _components(ops)
    reps, rep_idx = np.unique(comp, return_inverse=True)
    n_rep = reps.size
    if n_rep < MIN_REPLICAS:
        return None
    rank, role = ops["rank"].to_numpy(), ops["role"].to_numpy()
    ranks_per = pd.DataFrame({"rep": rep_idx, "role": role, "rank": rank}).drop_duplicates()
    if ranks_per.duplicated(["rep", "role"]).any() \
            or ranks_per["rank"].duplicated().any():  # two ranks of one role, or a rank's
        return None  # role changing within the trace
    frame = pd.DataFrame({"rep": rep_idx, "role": role, "step": ops["step"].to_numpy(),
                          "k": ops["k"].to_numpy(), "row": np.arange(len(ops))})
    frame = frame.sort_values(["rep", "role", "step", "k"], kind="stable")
    count = np.bincount(frame["rep"].to_numpy(), minlength=n_rep)
    if (count != count[0]).any():
        return None
    n_pos = int(count[0])
    key = frame[["role", "step", "k"]].to_numpy().reshape(n_rep, n_pos, 3)
    if (key != key[0]).any():
        return None
    rows = frame["row"].to_numpy().reshape(n_rep, n_pos)
    for col in _ALIKE:
        if col in ops:
            v = ops[col].to_numpy()[rows]
            if (v != v[0]).any():
                return None
    synced = sched.synced[rows]
    if (synced != synced[0]).any():
        return None
    for arr in ideals:
        v = arr[rows]
        if not ((v == v[0]) | (np.isnan(v) & np.isnan(v[0]))).all():
            return None
    if not _groups_alike(ops["group"].to_numpy(), sched.synced, rows, rep_idx):
        return None
    two = np.sort(rows[:2].ravel())
    sub = ops.iloc[two].reset_index(drop=True)
    sub_sched = schedule(sub)
    if sub_sched.released or sub_sched.split_steps:
        return None
    pos = np.empty(len(ops), dtype=np.int64)
    pos[rows] = np.arange(n_pos)
    return Replicas(
        sched=sub_sched, rows=rows, role=key[0][:, 0],
        replica_of_rank=dict(zip(ranks_per["rank"].tolist(), ranks_per["rep"].tolist())),
        role_of_rank=dict(zip(ranks_per["rank"].tolist(), ranks_per["role"].tolist())),
        lane_a=rep_idx[two] == 0, pos=pos[two],
        step_end=ops["kind"].to_numpy()[two] == STEP_END)


def _groups_alike(group: np.ndarray, synced: np.ndarray, rows: np.ndarray,
                  rep_idx: np.ndarray) -> bool:
    """Every position's groups either join one member of every replica (the same group
    down the column) or stay within each replica with the same size and the same first
    position in every replica (so the same members); unsynced positions are so in all."""
    n_rep, n_pos = rows.shape
    pos = np.empty(group.size, dtype=np.int64)
    pos[rows] = np.arange(n_pos)
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
