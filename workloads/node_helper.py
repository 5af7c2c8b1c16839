"""One node's host work for a run on a Ray cluster: CPU isolation, clock, route, files, undo.

`workloads.cluster` starts one `NodeHelper` per node that holds ranks, pinned
to that node (Ray's NodeAffinitySchedulingStrategy, hard), so everything that
touches a host happens on that host:

* `setup` gives the node's ranks their cgroup CPU shares (stragglerlab.host.
  cgroups; the side file names this helper as creator, so a run whose helper
  was killed is reaped by the next run's `cleanup_stale` on that node);
* `clock` answers round trips for the clock-offset estimate; `info` says
  which kernel (boot id) and which filesystem the node shares with the driver;
* `ifname` / `free_port` serve the rendezvous on rank 0's node IP;
* `status` / `fetch` hand progress and the ranks' raw trace parts to a driver
  on another filesystem; `read_parts` streams what the ranks appended since the
  driver's last call (stragglerlab.run.part_stream frames; workloads.cluster_stream
  writes them into the run folder on the driver's host while the run goes on);
* `undo` removes this node's cgroups (idempotent), then what dead runs left.

A plain class (no Ray import): the cluster launcher wraps it with
`ray.remote`. Runnable by hand for debugging:

    h = NodeHelper(); h.setup("run-1", {0: pid0, 1: pid1}, cores=0.5, period_us=10000)
    h.undo()
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from stragglerlab.host import cgroups, netns
from stragglerlab.host.cgroups import CpuIsolation
from stragglerlab.run.part_stream import DEFAULT_READ_BYTES, read_frames
from stragglerlab.workloads.placement import gloo_ifname
from stragglerlab.workloads.ports import rendezvous_port

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
NODE_ROOT_ENV = "STRAGGLERLAB_NODE_ROOT"
"""A node whose run folders live below another root (a node-local scratch disk, or a node
of the tests' simulated cluster without a shared filesystem) sets this in its environment
(`ray start` passes it on to its workers): its ranks write RUN as ROOT/RUN."""


def node_run_dir(run_dir: str | Path) -> Path:
    """The driver's run folder as this node's ranks and helper write and read it."""
    root = os.environ.get(NODE_ROOT_ENV)
    return Path(root) / str(run_dir).lstrip("/") if root else Path(run_dir)


def boot_id() -> str:
    """This kernel's boot id: nodes with the same one share CLOCK_MONOTONIC."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


class NodeHelper:
    """Host setup and undo of one node for one run."""

    def __init__(self) -> None:
        self.iso: CpuIsolation | None = None
        self.local: dict[int, int] = {}  # global rank -> index in this node's cgroups
        self.status_seen: dict[str, int] = {}  # rank -> mtime (ns) of the status last streamed
        self.doc: dict | None = None  # the run's nodes.json, for a monitor that attaches later

    def set_doc(self, doc: dict) -> None:
        """Keep the run's nodes (cluster_stream.nodes_doc) for `get_doc`."""
        self.doc = doc

    def get_doc(self) -> dict | None:
        """The run's nodes as the driver wrote them at the start (None: not yet)."""
        return self.doc

    def info(self, run_dir: str, token: str) -> dict:
        """Who this node is, and whether it sees the driver's run folder (token file)."""
        try:
            shared = (node_run_dir(run_dir) / ".driver-token").read_text() == token
        except OSError:
            shared = False
        return {"hostname": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
                "cpus": os.cpu_count() or 1, "shares_run_dir": shared}

    def clock(self) -> float:
        """This node's trace clock (the tracer's time.monotonic)."""
        return time.monotonic()

    def ifname(self, ip: str) -> str | None:
        """GLOO/NCCL_SOCKET_IFNAME to reach `ip` from this node (None: iproute2 missing)."""
        try:
            route = subprocess.run(["ip", "-o", "route", "get", ip], capture_output=True,
                                   text=True, timeout=10).stdout
            addrs = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True,
                                   text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return gloo_ifname(ip, route, addrs)

    def free_port(self, ip: str) -> int:
        """A TCP port free on `ip` here, outside the ephemeral range (for rank 0's store)."""
        return rendezvous_port(ip)

    def setup(self, run_id: str, pids: dict[int, int], cores: float, period_us: int) -> dict:
        """Give each of this node's ranks (global rank -> pid) its CPU share.

        Returns {"enabled", "reason", "cgroups": {rank: cgroup dict for the rank}}.
        """
        ok, why = CpuIsolation.available()
        if not ok:
            return {"enabled": False, "reason": why, "cgroups": {}}
        ranks = sorted(pids)
        self.local = {r: i for i, r in enumerate(ranks)}
        self.iso = CpuIsolation.create(run_id, len(ranks), cores, period_us=period_us)
        for r in ranks:
            self.iso.assign(self.local[r], pids[r])
        return {"enabled": True, "reason": "", "cgroups": {
            r: {"cpu_dir": str(self.iso.rank_cpu_dir(self.local[r])), "period_us": period_us,
                "cores": cores} for r in ranks}}

    def status(self, run_dir: str, ranks: list[int]) -> dict[int, dict]:
        """The ranks' status files on this node (progress, for a driver elsewhere)."""
        import json

        out = {}
        for r in ranks:
            try:
                out[r] = json.loads((node_run_dir(run_dir) / "status" / f"rank{r}.json")
                                    .read_text())
            except (OSError, ValueError):
                continue
        return out

    def fetch(self, run_dir: str, ranks: list[int]) -> dict[str, bytes]:
        """The ranks' raw outputs on this node, by path relative to the run folder."""
        out = {}
        for r in ranks:
            for rel in (f"trace-parts/rank{r}.bin", f"gc/rank{r}.jsonl", f"status/rank{r}.json"):
                try:
                    out[rel] = (node_run_dir(run_dir) / rel).read_bytes()
                except OSError:
                    continue
        return out

    def read_parts(self, run_dir: str, ranks: list[int], positions: dict[str, int],
                   max_bytes: int = DEFAULT_READ_BYTES) -> bytes:
        """The ranks' trace parts, GC logs and status files here past `positions` (the
        receiver's on the driver's host), as part_stream frames: whole records and lines
        only, each changed status once."""
        return read_frames(node_run_dir(run_dir), ranks, positions, max_bytes,
                           status_seen=self.status_seen)

    def undo(self) -> dict:
        """Remove this run's cgroups here, then the leftovers of dead runs on this node."""
        report: dict = {"cgroups_removed": False, "stale_cgroups": [], "stale_netns": []}
        if self.iso is not None:
            self.iso.cleanup()
            self.iso = None
            report["cgroups_removed"] = True
        report["stale_cgroups"] = cgroups.cleanup_stale()
        try:
            report["stale_netns"] = netns.cleanup_stale()
        except OSError:  # no iproute2 / no permission: no namespace of ours can exist
            pass
        return report
