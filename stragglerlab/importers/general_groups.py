"""Communication ops grouped across ranks, on one clock (stragglerlab.importers.kineto_general).

    m = match_groups(c, events, steps, align, base, pg_configs, tol, notes)
    m.c["group"]   # -1: local; equal ids on different ranks are one collective or P2P pair

* keys: a P2P pair by (src, dst, order in the step); a collective by (process
  group, `Seq`), else its order within its group in the step, else its order
  among the same kind in the step;
* clocks: stragglerlab.importers.rank_checks.align_clocks on the groups' ends,
  `none` (one clock; gloo collectives with no group then get one from
  pg_config by overlap in time, stragglerlab.importers.collective_groups),
  `collective` (each rank shifted by the median difference of the ends of the
  groups it shares with the lowest rank), `step` (first common ProfilerStep);
  `auto` as kineto_general's module doc says;
* a group whose members were not inside it together (the latest start after
  the first end, beyond the tolerance) is implausible: its ops become local.
  Not so a CPU P2P pair whose send ended before its receive began and whose
  receive ended after the send began (`eager_sends`): gloo writes a message
  into the peer's socket without waiting for the receive, so the sender went
  on (kineto_general reads that send as async) and the receive found the data
  there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.importers.collective_groups import assign_pg
from stragglerlab.importers.kineto_events import RankEvents
from stragglerlab.importers.rank_checks import align_clocks, resolved_align
from stragglerlab.trace.op_model import P2P_KINDS


def _group_keys(c: pd.DataFrame) -> pd.Series:
    """A string key per op; equal keys on different ranks are one group."""
    p2p = c["kind"].isin(P2P_KINDS) & (c["peer"] >= 0)
    send = c["kind"] == "send"
    src = np.where(send, c["rank"], c["peer"])
    dst = np.where(send, c["peer"], c["rank"])
    pair = pd.Series(src.astype(str), index=c.index) + ">" + pd.Series(dst.astype(str),
                                                                         index=c.index)
    step = c["step"].astype(str)
    ordinal_p2p = c.groupby(["rank", "step", "kind", "peer"]).cumcount().astype(str)
    has_pg = c["pg"] != ""
    ordinal_pg = c.groupby(["rank", "step", "pg"]).cumcount().astype(str)
    ordinal_kind = c.groupby(["rank", "step", "kind"]).cumcount().astype(str)
    key = np.where(
        p2p, "p2p|" + step + "|" + pair + "|" + ordinal_p2p,
        np.where(has_pg & (c["seq"] >= 0), "seq|" + c["pg"] + "|" + c["seq"].astype(str),
                 np.where(has_pg, "pg|" + c["pg"] + "|" + step + "|" + ordinal_pg,
                          "kind|" + c["kind"] + "|" + step + "|" + ordinal_kind)))
    local = c["kind"].isin(P2P_KINDS | {"sendrecv"}) & (c["peer"] < 0)
    key = np.where(local, "local|" + c.index.astype(str), key)
    return pd.Series(key, index=c.index)


@dataclass(kw_only=True)
class _Matched:
    """Communication ops grouped across ranks on one clock hypothesis."""

    c: pd.DataFrame
    """The ops with `pg`, `group` (-1: local) and start/end on rank 0's clock."""
    align: str
    """The mode used (collective falls back to step without a shared group)."""
    offsets: dict[int, float]
    """Microseconds added to each rank's times."""
    implausible: np.ndarray
    """Groups whose members were not inside them together: made local."""
    eager: np.ndarray
    """Per op of `c`: a send that did not wait for its receive (`eager_sends`; none unless
    asked for)."""


def eager_sends(c: pd.DataFrame, tol: float) -> np.ndarray:
    """Per op of `c` (grouped, µs start/end on one clock), whether it is the send of a P2P
    pair that ended before its receive began (beyond `tol`) while the receive ended after
    it began: a send that did not wait for its receive (module doc)."""
    g = c["group"].to_numpy()
    kind = c["kind"].to_numpy()
    pair = (g >= 0) & np.isin(kind, list(P2P_KINDS))
    if not pair.any():
        return np.zeros(len(c), bool)
    p = pd.DataFrame({"g": g[pair], "send": kind[pair] == "send",
                      "start": c["start"].to_numpy(float)[pair],
                      "end": c["end"].to_numpy(float)[pair]})
    sends = p[p["send"]].drop_duplicates("g", keep=False).set_index("g")
    recvs = p[~p["send"]].drop_duplicates("g", keep=False).set_index("g")
    both = sends.merge(recvs, left_index=True, right_index=True, suffixes=("_s", "_r"))
    ok = both.index[(both["end_s"] + tol < both["start_r"]) & (both["end_r"] >= both["start_s"])]
    return pair & (kind == "send") & np.isin(g, ok.to_numpy())


def _matched(c: pd.DataFrame, events: list[RankEvents], steps: list[int], align: str,
             base: dict[int, float], pg_configs: dict[int, list], tol: float,
             eager: bool = False) -> _Matched:
    """Group the ops on one clock mode and check the groups against the clocks."""
    c = c.copy()
    if align == "none":
        c["pg"] = assign_pg(c, pg_configs, tol)  # one clock: overlap in time is meaningful
    gid, _ = pd.factorize(_group_keys(c))
    size = np.bincount(gid)[gid]
    c["group"] = np.where(size >= 2, gid, -1)
    align, off = _offsets(c, events, steps, align, base)
    for col in ("start", "end"):
        c[col] = c[col] + c["rank"].map(off)
    latest = c.groupby("group")["start"].transform("max")
    first_end = c.groupby("group")["end"].transform("min")
    late = (c["group"] >= 0) & (latest > first_end + tol)
    sends = eager_sends(c, tol) if eager else np.zeros(len(c), bool)
    late &= ~c["group"].isin(c.loc[sends, "group"])  # their pairs stay matched
    bad = c.loc[late, "group"].unique()
    c.loc[c["group"].isin(bad), "group"] = -1
    return _Matched(c=c, align=align, offsets=off, implausible=bad, eager=sends)


def _match_on_evidence(c: pd.DataFrame, events: list[RankEvents], steps: list[int],
                       base: dict[int, float], pg_configs: dict[int, list], tol: float,
                       notes: list[str], eager: bool = False) -> _Matched:
    """No host named: one clock (none) unless aligning on collectives leaves fewer groups
    implausible: a wrong hypothesis shows as groups whose members were not in them
    together."""
    tries = {m: _matched(c, events, steps, m, base, pg_configs, tol, eager)
             for m in ("none", "collective")}
    pick = min(tries, key=lambda m: (tries[m].implausible.size, m != "none"))
    counts = ", ".join(f"{m} {t.implausible.size}" for m, t in tries.items())
    notes.append(f"the traces name no host: clocks aligned by `{tries[pick].align}`, the "
                 f"hypothesis with fewer implausible groups (none = one clock, collective "
                 f"= shifted to the collectives' ends: {counts}); pass --align to choose")
    return tries[pick]


def _offsets(c: pd.DataFrame, events: list[RankEvents], steps: list[int], align: str,
             base: dict[int, float]) -> tuple[str, dict[int, float]]:
    """rank_checks.align_clocks on the matched groups (times hold each rank's base)."""
    g = c[c["group"] >= 0]
    ends: dict[int, dict] = {}
    for (rank, group), end in g.groupby(["rank", "group"], sort=False)["end"].first().items():
        ends.setdefault(int(rank), {})[group] = end
    first = steps[0]
    starts = {e.rank: e.steps[first][0] + base[e.rank] for e in events}
    return align_clocks(align, ends, starts, {e.rank: 0.0 for e in events})


def match_groups(c: pd.DataFrame, events: list[RankEvents], steps: list[int], align: str,
                 base: dict[int, float], pg_configs: dict[int, list], tol: float,
                 notes: list[str], eager: bool = False) -> _Matched:
    """The ops grouped on the clock mode `align` (auto resolved here; see the module doc);
    `eager`: CPU traces, whose P2P sends may not wait for their receives (`eager_sends`)."""
    align = resolved_align({e.host for e in events}, align)
    if align == "evidence":
        return _match_on_evidence(c, events, steps, base, pg_configs, tol, notes, eager)
    return _matched(c, events, steps, align, base, pg_configs, tol, eager)
