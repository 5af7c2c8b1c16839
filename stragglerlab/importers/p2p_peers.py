"""Global peers of P2P ops whose trace names the peer only by its rank in a process group.

A gloo CPU trace carries no `record_param_comms`; with `record_shapes=True` the
dispatcher's `c10d::send(tensors, pg, dstRank, tag)` / `c10d::recv_(..., srcRank,
...)` keep their scalar args, but the peer is the rank *within the call's process
group*, and which group the call used is not written. `distributedInfo.pg_config`
lists the groups each rank belongs to, so each op has a few candidate global peers
(`pg.ranks[group_peer]` for every group holding the rank, itself excluded):

1. one candidate: that is the peer;
2. several: keep those that answer, i.e. ranks with an op of the opposite
   direction (a recv for a send) whose own candidates include this rank; one
   left: that is the peer;
3. none or still several: unknown (-1), and the op stays local.

Without pg_config every rank is taken to be in the default group, where a group
rank is the global rank.

    c["peer"] = resolve_group_peers(c, {r: pg_config}, notes)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

OPPOSITE = {"send": "recv", "recv": "send"}


def _groups_of(pg_config: list, rank: int) -> list[list[int]]:
    out = []
    for pg in pg_config or ():
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if isinstance(ranks, list) and rank in ranks and all(type(r) is int for r in ranks):
            out.append(ranks)
    return out


def _candidates(rank: int, group_peer: int, groups: list[list[int]]) -> frozenset[int]:
    if not groups:  # no pg_config: the default group, group rank = global rank
        return frozenset({group_peer} - {rank})
    return frozenset(g[group_peer] for g in groups if group_peer < len(g)) - {rank}


def resolve_group_peers(c: pd.DataFrame, pg_configs: dict[int, list],
                        notes: list[str]) -> pd.Series:
    """The `peer` column with each P2P op's global peer filled in from its `group_peer`
    where the module doc's rules settle it; other rows unchanged."""
    peer = c["peer"].copy()
    todo = c.index[c["kind"].isin(OPPOSITE.keys()) & (c["peer"] < 0) & (c["group_peer"] >= 0)]
    if not len(todo):
        return peer
    groups = {r: _groups_of(cfg, r) for r, cfg in pg_configs.items()}
    cand = {i: _candidates(int(c.at[i, "rank"]), int(c.at[i, "group_peer"]),
                           groups.get(int(c.at[i, "rank"]), []))
            for i in todo}
    # Who answers whom: (rank, kind) -> the ranks its candidates name.
    named: dict[tuple[int, str], set[int]] = {}
    for i, cs in cand.items():
        named.setdefault((int(c.at[i, "rank"]), c.at[i, "kind"]), set()).update(cs)
    unsettled = 0
    for i, cs in cand.items():
        rank, kind = int(c.at[i, "rank"]), c.at[i, "kind"]
        if len(cs) > 1:
            cs = frozenset(p for p in cs if rank in named.get((p, OPPOSITE[kind]), ()))
        if len(cs) == 1:
            peer.at[i] = next(iter(cs))
        else:
            unsettled += 1
    if unsettled:
        notes.append(f"{unsettled} send/recv op(s) name their peer by its rank in a process "
                     "group that the trace's pg_config does not settle: they are local ops")
    return peer.astype(np.int64)
