"""The driver's side of a cluster run's live files: nodes.json, the part stream, lost nodes.

While a run on a Ray cluster goes on, one thread of the driver (`NodeStreams`):

* pulls, from the helper of every node that does not share the driver's run
  folder, what its ranks appended to their trace parts, GC logs and status files
  since the last pull (`NodeHelper.read_parts`: stragglerlab.run.part_stream frames,
  returned through Ray's object store) and writes it into the run folder here
  (`PartReceiver`: duplicates ignored, out-of-order frames held, garbage refused
  naming the node, only whole records visible). The monitor beside the driver
  then tails every rank as if it ran here. The pull asks from what is on disk
  here, so a restarted driver-side receiver re-asks exactly what it lacks.
* keeps `RUN/nodes.json` (part_stream.NODES_SCHEMA): each node's ranks, clock
  offset to rank 0's node (measured at the start) and the correction the
  monitor applies live, whether it is streamed, and whether it is lost. A node
  is lost when Ray reports it dead, its helper's actor died, or its helper did
  not answer `MISSES_LOST` pulls in a row; nodes.json is rewritten (atomically)
  at once, so the monitor shows it within a look, and the live helpers are told,
  so a monitor attached later (`attached=True`, `monitor --ray-address`) learns it
  from them at its next pull.

    streams = NodeStreams(ray, helpers, node_of, run_dir, doc, say); streams.start()
    ...; streams.stop()          # a last pull of every live streamed node
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from stragglerlab.run.part_stream import NODES_JSON, NODES_SCHEMA, PartReceiver
from stragglerlab.util.atomic import atomic_write_text
from stragglerlab.workloads import placement as pl

STREAM_EVERY_S = 0.2
"""Seconds between two pulls: a step's records reach the run folder here within about this
(plus the round trip), well inside the monitor's 0.5 s look."""
PULL_TIMEOUT_S = 5.0
"""How long one pull may take before it counts as missed."""
MISSES_LOST = 3
"""Pulls in a row a node's helper may miss (time out) before the node is called lost."""
NAMESPACE = "stragglerlab"
"""Ray namespace of the runs' named node helpers (`monitor --ray-address` finds them there)."""


def helper_name(run_dir: str, node_id: str) -> str:
    """The Ray name of a run's helper on a node: the driver's run folder path and the node."""
    return f"{run_dir}|{node_id}"


def nodes_doc(node_of: list[str], infos: dict, clocks: dict, node_ips: dict) -> dict:
    """nodes.json's content at the start: each node's ranks, clock offset to rank 0's node
    (start measurement) and the correction applied from it (placement.applied_correction)."""
    ref = node_of[0]
    nodes = {}
    for nid in dict.fromkeys(node_of):
        same = infos[nid]["boot_id"] == infos[ref]["boot_id"] != ""
        off, unc = pl.relative_offset(clocks[nid], clocks[ref])
        nodes[nid] = {"ranks": [r for r, n in enumerate(node_of) if n == nid],
                      "ip": node_ips.get(nid), "hostname": infos[nid]["hostname"],
                      "same_clock": same, "offset_s": off, "uncertainty_s": unc,
                      "correction_s": pl.applied_correction(off, unc, same),
                      "streamed": not infos[nid]["shares_run_dir"], "lost": False,
                      "lost_at": None}
    return {"schema": NODES_SCHEMA, "reference_node": ref, "nodes": nodes}


def write_nodes(run_dir: Path, doc: dict) -> None:
    """RUN/nodes.json, replaced whole (the monitor never reads half of it)."""
    import json

    atomic_write_text(run_dir / NODES_JSON, json.dumps(doc, indent=1) + "\n")


class NodeStreams:
    """A driver thread: streams the other filesystems' ranks here and marks lost nodes."""

    def __init__(self, ray, helpers: dict, run_dir: Path, doc: dict, say,
                 every_s: float = STREAM_EVERY_S, remote_run: str | None = None,
                 attached: bool = False) -> None:
        self.ray, self.helpers, self.run_dir, self.doc, self.say = ray, helpers, run_dir, doc, say
        self.every_s = every_s
        self.remote_run = remote_run or str(run_dir)
        """The run folder's path as the driver named it (the helpers' side)."""
        self.attached = attached
        """A monitor attached later (`monitor --ray-address`), not the driver: it streams every
        node, calls a node lost only when Ray reports it dead (the driver's end kills the
        helpers), and sets `ended` once every helper is gone."""
        self.ended = threading.Event()
        self.gone: set[str] = set()
        self.receiver = PartReceiver(run_dir)
        self.misses = dict.fromkeys(helpers, 0)
        self.errors_told: set[str] = set()
        self.pulls = 0
        self.bytes = 0
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def streamed(self) -> dict[str, list[int]]:
        """node id -> ranks, of the live nodes whose files are streamed."""
        return {nid: n["ranks"] for nid, n in self.doc["nodes"].items()
                if (n["streamed"] or self.attached) and not n["lost"] and nid not in self.gone}

    def start(self) -> None:
        """Pull and watch from a daemon thread until `stop`."""
        self.thread = threading.Thread(target=self._loop, name="node-streams", daemon=True)
        self.thread.start()

    def stop(self) -> dict:
        """Stop the thread, pull once more (the last steps), return run.json `stream`."""
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=PULL_TIMEOUT_S * 2)
        self.pull()
        return {"nodes_streamed": sorted(nid for nid, n in self.doc["nodes"].items()
                                         if n["streamed"]), "pulls": self.pulls,
                "bytes": self.bytes, "errors": sorted(self.errors_told)}

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            t0 = time.monotonic()
            try:
                self.pull()
            except Exception as e:  # noqa: BLE001 - the stream is best effort; the run goes on
                self._tell(f"node stream: {type(e).__name__}: {e}"[:300])
            self.stop_event.wait(max(0.0, self.every_s - (time.monotonic() - t0)))

    def pull(self) -> None:
        """One round: every live node's helper asked at once (streamed ones for their new
        bytes, the others for their clock: a liveness ping), then the answers written."""
        with self.lock:
            ray = self.ray
            streamed = self.streamed()
            positions = self.receiver.positions()
            refs = {}
            for nid, h in self.helpers.items():
                if self.doc["nodes"][nid]["lost"] or nid in self.gone:
                    continue
                if nid in streamed:
                    mine = {k: v for k, v in positions.items()
                            if int(k.split(":")[1]) in set(streamed[nid])}
                    refs[nid] = h.read_parts.remote(self.remote_run, streamed[nid], mine)
                else:
                    refs[nid] = h.clock.remote()
            # Attached: the driver's view of lost nodes, from any live helper it told.
            told = self.helpers[next(iter(refs))].get_doc.remote() \
                if self.attached and refs else None
            dead = set()
            for nid, ref in refs.items():
                try:
                    data = ray.get(ref, timeout=PULL_TIMEOUT_S)
                except ray.exceptions.GetTimeoutError:
                    self.misses[nid] += 1
                    if self.misses[nid] >= MISSES_LOST:
                        dead.add(nid)
                    continue
                except Exception:  # noqa: BLE001 - the actor or its node died
                    (self.gone if self.attached else dead).add(nid)
                    continue
                self.misses[nid] = 0
                if nid in streamed:
                    receipt = self.receiver.accept(nid, data, mark=False)
                    self.bytes += receipt.written_bytes
                    for e in receipt.errors:
                        self._tell(e)
            self.receiver.mark_statuses()  # the round's statuses have landed: once
            self.pulls += 1
            if told is not None:
                try:
                    doc = ray.get(told, timeout=PULL_TIMEOUT_S) or {}
                    dead |= {nid for nid, n in doc.get("nodes", {}).items()
                             if n.get("lost") and nid in self.doc["nodes"]}
                except Exception:  # noqa: BLE001, S110 - that helper is gone: next pull
                    pass
            dead |= self._ray_dead()
            self._mark_lost(dead)
            if self.attached and all(n["lost"] or nid in self.gone
                                     for nid, n in self.doc["nodes"].items()):
                self.ended.set()  # the driver ended the run (its helpers went with it)

    def _ray_dead(self) -> set[str]:
        try:
            return {n["NodeID"] for n in self.ray.nodes() if not n.get("Alive", True)} & \
                set(self.helpers)
        except Exception:  # noqa: BLE001 - the GCS busy: the pings still tell
            return set()

    def _mark_lost(self, dead: set[str]) -> None:
        new = [nid for nid in dead if not self.doc["nodes"][nid]["lost"]]
        if not new:
            return
        for nid in new:
            node = self.doc["nodes"][nid]
            node.update(lost=True, lost_at=round(time.time(), 3))
            self.say(f"node {nid[:12]} ({node['hostname']}) lost with ranks {node['ranks']}")
        write_nodes(self.run_dir, self.doc)
        if not self.attached:  # tell the live helpers: a monitor attached later asks them
            for nid, h in self.helpers.items():
                if not self.doc["nodes"][nid]["lost"]:
                    h.set_doc.remote(self.doc)

    def _tell(self, message: str) -> None:
        if message not in self.errors_told and len(self.errors_told) < 100:
            self.errors_told.add(message)
            self.say(message)
