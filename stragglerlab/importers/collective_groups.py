"""The process group of collectives whose trace does not name it (gloo CPU traces).

torch 2.13's gloo backend writes no `record_param_comms`: a collective is a
`gloo:<op>` range with no process group, so a job with several groups (a
pipeline's per-stage DP all-reduces) cannot be matched by group. Each rank's
`distributedInfo.pg_config` lists the groups it is in; the op's group is the
one its members' ops agree with. For a candidate group M and the k-th
collective of a kind in a step (k counted per rank):

* M *explains* (kind, k) when, in every kept step, every member of M has that
  op and the members' ops overlap in time (the latest start is no later than
  the earliest end, within the clock tolerance): members of one collective are
  inside it together;
* a rank's op takes the largest group holding the rank that explains it (a
  world collective also overlaps on every subgroup); among equal sizes, the
  one whose members leave it closest together (median spread of the ends).

Ops no group explains keep no group, and the importer matches them by order.

    c["pg"] = assign_pg(c, {rank: pg_config}, tol_us=50.0)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.importers.layout import rank_lists
from stragglerlab.trace.op_model import P2P_KINDS


def _member_sets(pg_configs: dict[int, list]) -> list[tuple[int, ...]]:
    sets = {tuple(sorted(set(ranks))) for cfg in pg_configs.values()
            for ranks in rank_lists(cfg) if len(ranks) >= 2}
    return sorted(sets, key=lambda m: (-len(m), m))


def assign_pg(c: pd.DataFrame, pg_configs: dict[int, list], tol_us: float) -> pd.Series:
    """The `pg` column with collectives that had none given a `pgcfg:<ranks>` key where the
    module doc's rule settles it; other rows unchanged."""
    pg = c["pg"].copy()
    todo = (pg == "") & ~c["kind"].isin(P2P_KINDS | {"sendrecv"})
    sets = _member_sets(pg_configs)
    if not todo.any() or not sets:
        return pg
    r = c.loc[todo, ["rank", "step", "kind", "start", "end"]].sort_values("start", kind="stable")
    r["k"] = r.groupby(["rank", "step", "kind"]).cumcount()
    steps = r["step"].nunique()
    # (rank, kind, k) -> (size, spread, key) of the best group found so far
    best: dict[tuple, tuple[int, float, str]] = {}
    for members in sets:
        sub = r[r["rank"].isin(members)]
        if sub.empty:
            continue
        g = sub.groupby(["kind", "k", "step"])
        per = pd.DataFrame({"n": g["rank"].nunique(), "last_start": g["start"].max(),
                            "first_end": g["end"].min(),
                            "spread": g["end"].max() - g["end"].min()})
        per["ok"] = (per["n"] == len(members)) & (per["last_start"] <= per["first_end"] + tol_us)
        by_op = per.groupby(level=["kind", "k"]).agg(ok=("ok", "all"), steps=("ok", "size"),
                                                      spread=("spread", "median"))
        explained = by_op[by_op["ok"] & (by_op["steps"] == steps)]
        key = "pgcfg:" + ",".join(map(str, members))
        for (kind, k), row in explained.iterrows():
            for rank in members:
                cand = (len(members), -float(row["spread"]), key)
                cur = best.get((rank, kind, k))
                if cur is None or cand[:2] > cur[:2]:
                    best[(rank, kind, k)] = cand
    if best:
        keys = [best.get((a, b, k), (0, 0.0, ""))[2]
                for a, b, k in zip(r["rank"], r["kind"], r["k"], strict=True)]
        pg.loc[r.index] = np.asarray(keys, dtype=object)
    return pg
