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
* a group is a property of the collective, not of one rank's op: an
  explanation (M, kind, k) is taken for all of M's members or for none. The
  largest groups are taken first (a world collective also overlaps on every
  subgroup), among equal sizes the one whose members leave it closest
  together (median spread of the ends); an explanation is skipped where a
  member's op already has a group. A rank's choice alone could disagree with
  its peers': with a clock tolerance of a millisecond, a DP peer's reduce and
  an embedding group's both overlap a rank's short op, and the rank taking one
  group while its peer took the other left both ops unmatched (a slow rank's
  wait counted as its fast peer's transfer).

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
    # every explanation: (size, spread, key, kind, k, members)
    found: list[tuple[int, float, str, str, int, tuple[int, ...]]] = []
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
        found += [(len(members), float(row["spread"]), key, kind, int(k), members)
                  for (kind, k), row in explained.iterrows()]
    taken: dict[tuple, str] = {}  # (rank, kind, k) -> key
    for _size, _spread, key, kind, k, members in sorted(found, key=lambda f: (-f[0], f[1], f[2])):
        ops = [(m, kind, k) for m in members]
        if not any(o in taken for o in ops):
            taken.update(dict.fromkeys(ops, key))
    if taken:
        keys = [taken.get(o, "") for o in zip(r["rank"], r["kind"], r["k"], strict=True)]
        pg.loc[r.index] = np.asarray(keys, dtype=object)
    return pg
