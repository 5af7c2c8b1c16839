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

A send/recv that names no peer at all (no `Src`/`Dst Rank` in its args and no
`c10d::send` / `c10d::recv_` launch with its scalar args: a trace profiled
without record_shapes, or trimmed to its `gloo:*` / `user_annotation` ranges)
stays local too, with a note that says so: on a pipeline that is every P2P op,
and its waits are then taken as work.

Without pg_config every rank is taken to be in the default group, where a group
rank is the global rank.

    c["peer"] = resolve_group_peers(c, {r: pg_config}, notes)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.importers.layout import rank_lists

OPPOSITE = {"send": "recv", "recv": "send"}


def _candidates(rank: int, group_peer: int, groups: list[list[int]]) -> frozenset[int]:
    if not groups:  # no pg_config: the default group, group rank = global rank
        return frozenset({group_peer} - {rank})
    return frozenset(g[group_peer] for g in groups if group_peer < len(g)) - {rank}


def resolve_group_peers(c: pd.DataFrame, pg_configs: dict[int, list],
                        notes: list[str]) -> pd.Series:
    """The `peer` column with each P2P op's global peer filled in from its `group_peer`
    where the module doc's rules settle it; other rows unchanged."""
    peer = c["peer"].copy()
    p2p = c["kind"].isin(OPPOSITE.keys()) & (c["peer"] < 0)
    nameless = int((p2p & (c["group_peer"] < 0)).sum())
    if nameless:
        notes.append(f"{nameless} send/recv op(s) name no peer: the trace holds no "
                     "`c10d::send` / `c10d::recv_` launch with its arguments for them (profile "
                     "with record_shapes=True; a trimmed trace must keep the `c10d::` ops) "
                     "and no `Src`/`Dst Rank`: they are local ops")
    todo = p2p & (c["group_peer"] >= 0)
    if not todo.any():
        return peer
    groups = {r: [g for g in rank_lists(cfg) if r in g] for r, cfg in pg_configs.items()}
    # The rules depend on (rank, kind, group_peer) only: settle each once.
    keys = c.loc[todo, ["rank", "kind", "group_peer"]]
    uniq = keys.drop_duplicates()
    cand = {(int(r), k, int(g)): _candidates(int(r), int(g), groups.get(int(r), []))
            for r, k, g in uniq.itertuples(index=False)}
    # Who answers whom: (rank, kind) -> the ranks its candidates name.
    named: dict[tuple[int, str], set[int]] = {}
    for (r, k, _g), cs in cand.items():
        named.setdefault((r, k), set()).update(cs)
    settled = []
    for (r, k, _g), cs in cand.items():
        if len(cs) > 1:
            cs = frozenset(p for p in cs if r in named.get((p, OPPOSITE[k]), ()))
        settled.append(next(iter(cs)) if len(cs) == 1 else -1)
    found = keys.merge(uniq.assign(found=settled), on=["rank", "kind", "group_peer"],
                       how="left")["found"].to_numpy(np.int64)
    peer.loc[keys.index] = found
    unsettled = int((found < 0).sum())
    if unsettled:
        notes.append(f"{unsettled} send/recv op(s) name their peer by its rank in a process "
                     "group that the trace's pg_config does not settle: they are local ops")
    return peer.astype(np.int64)
