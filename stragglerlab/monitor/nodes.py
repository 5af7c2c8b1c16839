"""A cluster run's nodes as the monitor sees them: clock corrections applied live, lost nodes.

The driver of a run on a Ray cluster writes `RUN/nodes.json` (stragglerlab.run.part_stream
NODES_SCHEMA) before its ranks start, and again when a node is lost. The monitor re-reads
it at every look (a small file; compared by content, not mtime):

* each rank's `correction_s` (its node's clock offset to rank 0's node, measured at the
  start) is subtracted from the times of the records read from then on, as the run-folder
  assembler subtracts run.json's at the end, so a window's ranks share one clock;
* a node marked `lost` names its ranks: the page and /metrics show them, and the windows
  go on with the remaining ranks (runner.Monitor).

A folder without nodes.json (a run on one host) has no correction and no lost node.

    view = NodesView(run_dir); problem = view.refresh()
    new = view.correct(tail.poll()); view.lost_ranks()     # {node_id: [ranks]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from stragglerlab.run.part_stream import NODES_JSON

MAX_CORRECTION_S = 3600.0
"""Largest clock correction taken from nodes.json: a node an hour off is a broken clock (or
a broken file), not an offset to undo."""


class NodesView:
    """nodes.json, read back at every look."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / NODES_JSON
        self.raw: bytes | None = None
        self.nodes: dict[str, dict] = {}
        """node id -> {"ranks", "correction_s", "lost", ...} as last read well."""
        self.correction: dict[int, float] = {}
        """rank -> seconds subtracted from its times (non-zero ones only)."""

    def refresh(self) -> str | None:
        """Re-read nodes.json when it changed; what is wrong with it (None: fine or absent).
        A bad file keeps what was read before."""
        try:
            raw = self.path.read_bytes()
        except OSError:
            return None
        if raw == self.raw:
            return None
        self.raw = raw
        try:
            nodes = _parse(json.loads(raw))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return (f"{self.path}: {e}; nodes.json is written by `train --ray-address` "
                    "(stragglerlab/run/part_stream.py NODES_SCHEMA); its last good content is kept")
        self.nodes = nodes
        self.correction = {r: n["correction_s"] for n in nodes.values() for r in n["ranks"]
                           if n["correction_s"]}
        return None

    def correct(self, new: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Records on rank 0's node's clock (a corrected rank's records are copied)."""
        if not self.correction:
            return new
        out = {}
        for rank, rec in new.items():
            shift = self.correction.get(rank)
            if shift:
                rec = rec.copy()
                rec["start"] -= shift
                rec["end"] -= shift
            out[rank] = rec
        return out

    def lost_ranks(self) -> dict[str, list[int]]:
        """{node id: its ranks} of the nodes marked lost."""
        return {nid: sorted(n["ranks"]) for nid, n in sorted(self.nodes.items()) if n["lost"]}

    def summary(self) -> list[dict]:
        """Per node for the page: id, ranks, correction, lost, streamed."""
        return [{"node_id": nid, "ranks": n["ranks"], "correction_s": n["correction_s"],
                 "lost": n["lost"], "streamed": n.get("streamed", False),
                 "hostname": n.get("hostname")} for nid, n in sorted(self.nodes.items())]


def _parse(data: dict) -> dict[str, dict]:
    nodes = data["nodes"]
    if not isinstance(nodes, dict):
        raise ValueError("`nodes` is not an object of node id -> node")
    out = {}
    for nid, n in nodes.items():
        ranks = n["ranks"]
        if not isinstance(ranks, list) or not all(isinstance(r, int) and r >= 0 for r in ranks):
            raise ValueError(f"node {nid}: `ranks` is not a list of rank numbers")
        corr = float(n.get("correction_s") or 0.0)
        if not math.isfinite(corr) or abs(corr) > MAX_CORRECTION_S:
            raise ValueError(f"node {nid}: correction_s {corr} is not a clock offset "
                             f"within {MAX_CORRECTION_S:g} s")
        out[str(nid)] = dict(n, ranks=ranks, correction_s=corr, lost=bool(n.get("lost")))
    return out
