"""Simulate the general op model (stragglerlab.trace.op_model): per-rank chains of communication
ops with compute gaps, synchronized at their groups, for many scenarios at once.

    sched = schedule(ops)                               # structure only, built once
    steps = simulate(sched, gap, transfer)              # (n_steps, n_scenarios) seconds

Each (rank, step) is a chain that starts at 0. A row arrives at the previous
row's point plus its gap (the point: the row's end; for an async row its
arrival, since the rank went on from the launch; the step-end row also waits
for the chain's async ops: stragglerlab.trace.op_model); a group starts at its
members' latest arrival (a local row at its own arrival); each member ends at
that start plus its transfer duration. A step's time is the latest chain end
of the step. A posted row (a send/recv a helper thread posted ahead, `wait_k`)
arrives in its chain's order and the chain goes on from its arrival; its group
runs when every member has arrived, and the row at its `wait_k` waits for its
end. With the host model (GPU traces, `simulate(..., host=...)`) each
chain also keeps a host clock: a row arrives no earlier than the host allows,
and the step-end row ends when the host does (stragglerlab.importers.
general_host).

The schedule is computed once from the structure: rows are put in rounds, a
row in a later round than its chain predecessor and a group's members in one
round, so a round is a vectorized update over all chains and all scenarios.
When the traced ranks issue groups in orders that contradict each other (the
ranks would deadlock, e.g. matching by order in a trace that lost events),
the waiting group whose earliest member started first is released with the
members that reached it; its other members become local ops. The count is
`Schedule.released`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.trace.op_model import STEP_END, posted_rows, waiter_rows

SCENARIO_CHUNK = 32
"""Scenarios simulated per pass (memory: rows x chunk floats)."""


@dataclass(kw_only=True)
class Schedule:
    """Rounds of rows (see the module doc), built once per op table."""

    chain: np.ndarray
    """Chain id (one per rank and step) of each row."""
    n_chains: int
    """Number of chains."""
    chain_step: np.ndarray
    """Index into `steps` of each chain."""
    steps: np.ndarray
    """The step numbers, ascending."""
    rounds: list[tuple[np.ndarray, np.ndarray, int]]
    """Per round: (rows, index of each row's sync set within the round, number of sets)."""
    synced: np.ndarray
    """Whether each row waits for its group (False: local, or released)."""
    released: int
    """Groups released early because the ranks' orders contradicted each other."""
    split_steps: int
    """Groups whose members fell in different steps, made local."""
    asynchronous: np.ndarray | None = None
    """Per row: async (the chain goes on from its arrival); None: no row is."""
    is_end: np.ndarray | None = None
    """Per row: the step-end row (it waits for the chain's async ops); None with no async."""
    serial: np.ndarray | None = None
    """Per row: it also waits for the chain's earlier rows to end (an in-order NCCL stream);
    None: no row does."""
    posted: np.ndarray | None = None
    """Per row: posted ahead (see the module doc); None: no row is. With it, `plan` holds
    one _PostedRound per round."""
    plan: list[_PostedRound] | None = None
    """The rounds as _simulate_posted runs them (index arrays built once per schedule)."""


@dataclass(kw_only=True)
class _PostedRound:
    """One round of a schedule with posted rows: `a` arrive (the round's members that are
    not posted, in `rows` order, then its posts), then `rows`' groups run."""

    a: np.ndarray
    ca: np.ndarray
    """Chain of each row of a."""
    end_a: np.ndarray
    """(len(a), 1): the row is its chain's step end."""
    n_sync: int
    """How many rows of a are members of this round's groups (the rest are posts)."""
    post_slot: np.ndarray
    """Slot (index among the posted rows) of each post of a."""
    post_chain: np.ndarray
    """Chain of each post."""
    wait_pos: np.ndarray
    """Positions in a of rows that wait for posted rows ..."""
    wait_slot: np.ndarray
    """... and the slot of the posted row each waits for (one pair each)."""
    rows: np.ndarray
    sets: np.ndarray
    n_sets: int
    g_sync: np.ndarray
    """Positions in rows of the members that are not posted (arrived in this round)."""
    g_post: np.ndarray
    """Positions in rows of the posted members (arrived in an earlier round) ..."""
    g_post_slot: np.ndarray
    """... and their slots."""
    cr: np.ndarray
    """Chain of each member that is not posted."""
    asy_cr: np.ndarray
    """(n_sync, 1): that member is async (not posted)."""


def schedule(ops: pd.DataFrame) -> Schedule:
    """The rounds of an op table sorted by rank, step, k (see the module doc)."""
    n = len(ops)
    chain, _ = pd.factorize(pd.MultiIndex.from_arrays([ops["rank"], ops["step"]]))
    steps = np.sort(ops["step"].unique())
    n_chains = int(chain.max()) + 1 if n else 0
    chain_step = np.zeros(n_chains, dtype=np.int64)
    chain_step[chain] = np.searchsorted(steps, ops["step"].to_numpy())
    group = ops["group"].to_numpy()
    synced = group >= 0
    split = 0
    if synced.any():
        g = pd.Series(ops["step"].to_numpy()[synced]).groupby(group[synced]).nunique()
        bad = g.index[g.to_numpy() > 1].to_numpy()
        if bad.size:
            split = int(bad.size)
            synced &= ~np.isin(group, bad)
    size = np.bincount(np.where(synced, group, 0), weights=synced, minlength=1).astype(int) \
        if n else np.zeros(1, int)
    starts = ops["start_s"].to_numpy()
    rows_of = np.split(np.arange(n), np.flatnonzero(np.diff(chain)) + 1) if n else []
    posted = posted_rows(ops)
    waiter = waiter_rows(ops)
    is_posted = set(np.flatnonzero(posted).tolist())
    need: dict[int, int] = {}  # row -> posted rows it waits for whose groups have not run
    for w in waiter[posted].tolist():
        need[w] = need.get(w, 0) + 1
    cnt = [0] * size.size
    size_l, group_l, synced_l = size.tolist(), group.tolist(), synced.tolist()
    waiting: dict[int, list[int]] = {}
    ready: deque[list[int]] = deque()
    post_ready: list[int] = []
    heads: set[int] = set()
    blocked: set[int] = set()

    def arrive(row: int) -> None:
        if need and need.get(row):
            blocked.add(row)
        elif row in is_posted:
            post_ready.append(row)
        else:
            join(row)

    def join(row: int) -> None:
        heads.add(row)
        if synced_l[row]:
            g_ = group_l[row]
            cnt[g_] += 1
            waiting.setdefault(g_, []).append(row)
            if cnt[g_] == size_l[g_]:
                ready.append(waiting.pop(g_))
        else:
            ready.append([row])

    chain_of = chain.tolist()
    first_of = [int(r[0]) for r in rows_of]
    n_rows_of = [len(r) for r in rows_of]
    head = [0] * n_chains

    def advance(c: int) -> None:
        head[c] += 1
        if head[c] < n_rows_of[c]:
            arrive(first_of[c] + head[c])

    for c in range(n_chains):
        arrive(first_of[c])
    rounds, posts, released, done = [], [], 0, 0
    while done < n:
        emit = list(ready)
        ready.clear()
        now = np.array(post_ready, dtype=np.int64)
        post_ready.clear()
        if not emit and not now.size:  # contradicting orders: release the earliest-started
            row = min(heads, key=lambda r: starts[r])  # waiting group
            g_ = group_l[row]
            members = waiting.pop(g_)
            for r in np.flatnonzero(group == g_).tolist():
                if r not in members:
                    synced_l[r] = False
            size_l[g_] = len(members)
            emit = [members]
            released += 1
        rows = np.fromiter((r for s in emit for r in s), dtype=np.int64)
        sets = np.repeat(np.arange(len(emit)), [len(s) for s in emit])
        rounds.append((rows, sets, len(emit)))
        posts.append(now)
        done += rows.size
        for r in now.tolist():  # posted: in its group from now on; the chain goes on
            join(r)
            advance(chain_of[r])
        for r in rows.tolist():
            heads.discard(r)
            if r in is_posted:  # its group ran: the row waiting for it may go
                w = int(waiter[r])
                need[w] -= 1
                if not need[w]:
                    del need[w]
                    if w in blocked:
                        blocked.discard(w)
                        arrive(w)
            else:
                advance(chain_of[r])
    synced = np.array(synced_l, dtype=bool)
    asy = ops["async"].to_numpy(bool) if "async" in ops else np.zeros(n, bool)
    ser = ops["serial"].to_numpy(bool) if "serial" in ops else np.zeros(n, bool)
    is_end = ops["kind"].to_numpy() == STEP_END
    plan = _posted_plan(rounds, posts, posted, waiter, chain, asy, is_end) \
        if posted.any() else None
    return Schedule(chain=chain, n_chains=n_chains, chain_step=chain_step, steps=steps,
                    rounds=rounds, synced=synced, released=released, split_steps=split,
                    asynchronous=asy if asy.any() else None,
                    is_end=is_end if asy.any() else None,
                    serial=ser if ser.any() else None,
                    posted=posted if posted.any() else None, plan=plan)


HOST_PARTS = ("host_s", "host_after_s", "sync_s", "sync_gate_s", "sync_tail_s", "gate_back_s",
              "gate_tail_s")
"""The host model's per-row inputs (stragglerlab.importers.general_host); with them, `gap`
is the row's device work (`device_s`)."""


def simulate(sched: Schedule, gap: np.ndarray, transfer: np.ndarray,
             host: dict[str, np.ndarray] | None = None,
             step_end: np.ndarray | None = None) -> np.ndarray:
    """Step times, (n_steps, n_scenarios), from per-row gap and transfer (n_rows,
    n_scenarios) seconds. With `host` (HOST_PARTS -> (n_rows, n_scenarios), NaN where the
    trace shows none) each chain also runs its host: the host advances by its segments,
    resumes after a sync at the later of itself and the device, a row arrives no earlier
    than the host reached its last gating launch plus what ran after it, and the step ends
    (`step_end` rows) when the host does."""
    if sched.posted is not None:
        return _simulate_posted(sched, gap, transfer, host, step_end)
    n_s = gap.shape[1]
    end = np.zeros((sched.n_chains, n_s))
    asy, ser = sched.asynchronous, sched.serial
    aend = np.zeros((sched.n_chains, n_s)) if asy is not None else None
    cend = np.zeros((sched.n_chains, n_s)) if ser is not None else None
    h = np.zeros((sched.n_chains, n_s)) if host is not None else None
    for rows, sets, n_sets in sched.rounds:
        c = sched.chain[rows]
        if asy is None:
            point = end[c]
        else:  # the step end also waits for the chain's async ops
            point = np.where(sched.is_end[rows, None], np.maximum(end[c], aend[c]), end[c])
        arrive = _arrive(rows, c, point, gap, ser, cend, h, host, step_end)
        start = _group_start(arrive, sets, n_sets)
        done = start + transfer[rows]
        if asy is None:
            end[c] = done
        else:
            a = asy[rows, None]
            end[c] = np.where(a, arrive, done)
            aend[c] = np.where(a, np.maximum(aend[c], done), aend[c])
        if ser is not None:
            cend[c] = np.maximum(cend[c], done)
    out = np.full((sched.steps.size, n_s), -np.inf)
    np.maximum.at(out, sched.chain_step, end)
    return out


def _arrive(rows: np.ndarray, c: np.ndarray, point: np.ndarray, gap: np.ndarray,
            ser: np.ndarray | None, cend: np.ndarray | None, h: np.ndarray | None,
            host: dict[str, np.ndarray] | None, step_end: np.ndarray | None) -> np.ndarray:
    """When `rows` (of chains `c`) arrive, from their chains' points: after their gap; no
    earlier than their chain's earlier ops end where they are serial; with the host model,
    no earlier than the host allows (h, the chains' host clocks, advances in place)."""
    arrive = point + gap[rows]
    if ser is not None:  # queued behind the chain's earlier ops on its stream
        arrive = np.where(ser[rows, None], np.maximum(arrive, cend[c]), arrive)
    if h is not None:
        prev = h[c]
        at = prev + host["host_s"][rows]
        done = np.fmax(point + host["sync_s"][rows],  # NaN: no sync, no wait
                       prev + host["sync_gate_s"][rows] + host["sync_tail_s"][rows])
        at = np.fmax(at, done) + host["host_after_s"][rows]
        arrive = np.fmax(arrive, at - host["gate_back_s"][rows] + host["gate_tail_s"][rows])
        known = np.isfinite(at)
        arrive = np.where(step_end[rows, None] & known, at, arrive)
        h[c] = np.where(known, at, h[c])
    return arrive


def _group_start(arrive: np.ndarray, sets: np.ndarray, n_sets: int) -> np.ndarray:
    """Per row, when its group starts: its set's latest arrival (rows of one set are one
    group; a round of single-row sets is the arrivals themselves)."""
    if n_sets == arrive.shape[0]:
        return arrive
    latest = np.full((n_sets, arrive.shape[1]), -np.inf)
    np.maximum.at(latest, sets, arrive)
    return latest[sets]


def _posted_plan(rounds: list, posts: list, posted: np.ndarray, waiter: np.ndarray,
                 chain: np.ndarray, asy: np.ndarray, is_end: np.ndarray) -> list[_PostedRound]:
    """The rounds of a schedule with posted rows as _simulate_posted runs them."""
    slot = np.full(posted.size, -1, dtype=np.int64)
    slot[posted] = np.arange(int(posted.sum()))
    src = np.flatnonzero(posted)
    at_round = np.zeros(posted.size, dtype=np.int64)
    pos_in_a = np.zeros(posted.size, dtype=np.int64)
    arrays = []
    for i, ((rows, sets, n_sets), now) in enumerate(zip(rounds, posts, strict=True)):
        mine = ~posted[rows]
        a = np.concatenate([rows[mine], now])
        at_round[a] = i
        pos_in_a[a] = np.arange(a.size)
        arrays.append((a, rows, sets, n_sets, mine, now))
    by = at_round[waiter[src]]
    plan = []
    for i, (a, rows, sets, n_sets, mine, now) in enumerate(arrays):
        w = src[by == i]
        own = rows[mine]
        plan.append(_PostedRound(
            a=a, ca=chain[a], end_a=is_end[a, None], n_sync=int(own.size),
            post_slot=slot[now], post_chain=chain[now],
            wait_pos=pos_in_a[waiter[w]], wait_slot=slot[w],
            rows=rows, sets=sets, n_sets=n_sets, g_sync=np.flatnonzero(mine),
            g_post=np.flatnonzero(~mine), g_post_slot=slot[rows[~mine]],
            cr=chain[own], asy_cr=asy[own, None]))
    return plan


def _simulate_posted(sched: Schedule, gap: np.ndarray, transfer: np.ndarray,
                     host: dict[str, np.ndarray] | None,
                     step_end: np.ndarray | None) -> np.ndarray:
    """simulate() for a schedule with posted rows: a round first computes the arrivals of
    its rows that arrive (its members that are not posted, and its posts), then runs its
    groups from the members' arrivals, a posted member's kept from when it arrived."""
    n_s = gap.shape[1]
    n_posted = int(sched.posted.sum())
    end = np.zeros((sched.n_chains, n_s))
    aend = np.zeros((sched.n_chains, n_s))
    ser = sched.serial
    cend = np.zeros((sched.n_chains, n_s)) if ser is not None else None
    h = np.zeros((sched.n_chains, n_s)) if host is not None else None
    parr = np.zeros((n_posted, n_s))
    pdone = np.zeros((n_posted, n_s))
    for r in sched.plan:
        a, c = r.a, r.ca
        point = np.where(r.end_a, np.maximum(end[c], aend[c]), end[c])
        if r.wait_pos.size:  # a row waiting for posted rows starts no earlier than their ends
            waited = np.full(point.shape, -np.inf)
            np.maximum.at(waited, r.wait_pos, pdone[r.wait_slot])
            point = np.maximum(point, waited)
        arrive = _arrive(a, c, point, gap, ser, cend, h, host, step_end)
        if r.post_slot.size:  # the chain goes on from a post
            parr[r.post_slot] = arrive[r.n_sync:]
            end[r.post_chain] = arrive[r.n_sync:]
        if not r.rows.size:
            continue
        mine = arrive[:r.n_sync]
        if r.g_post.size:
            at_ = np.empty((r.rows.size, n_s))
            at_[r.g_sync] = mine
            at_[r.g_post] = parr[r.g_post_slot]
        else:
            at_ = mine
        done = _group_start(at_, r.sets, r.n_sets) + transfer[r.rows]
        own = done[r.g_sync] if r.g_post.size else done
        end[r.cr] = np.where(r.asy_cr, mine, own)
        aend[r.cr] = np.where(r.asy_cr, np.maximum(aend[r.cr], own), aend[r.cr])
        if r.g_post.size:
            pdone[r.g_post_slot] = done[r.g_post]
        if ser is not None:
            cend[r.cr] = np.maximum(cend[r.cr], own)
    out = np.full((sched.steps.size, n_s), -np.inf)
    np.maximum.at(out, sched.chain_step, end)
    return out


def simulate_masks(sched: Schedule, gap: tuple[np.ndarray, np.ndarray],
                   transfer: tuple[np.ndarray, np.ndarray], keep_gap: np.ndarray,
                   keep_transfer: np.ndarray,
                   host: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
                   step_end: np.ndarray | None = None) -> np.ndarray:
    """Step times of scenarios given as boolean masks (n_rows, n_scenarios): True = the
    row keeps its original gap (keep_gap; the host parts too) / transfer (keep_transfer),
    False = the ideal one. gap, transfer and each host part are (original, ideal) per row.
    SCENARIO_CHUNK at a time."""
    out = []
    for j in range(0, keep_gap.shape[1], SCENARIO_CHUNK):
        sl = slice(j, j + SCENARIO_CHUNK)
        g = np.where(keep_gap[:, sl], gap[0][:, None], gap[1][:, None])
        t = np.where(keep_transfer[:, sl], transfer[0][:, None], transfer[1][:, None])
        hp = None if host is None else {
            k: np.where(keep_gap[:, sl], v[0][:, None], v[1][:, None]) for k, v in host.items()}
        out.append(simulate(sched, g, t, hp, step_end))
    return np.concatenate(out, axis=1) if out else np.zeros((sched.steps.size, 0))
