"""Processes a killed run leaves behind: mark them at launch, kill them at the next start.

A driver SIGKILLed mid-run cannot shut its Ray instance down, so its raylet,
GCS and rank actors may outlive it (cgroups and namespaces have their own
`cleanup_stale`). Every process the driver starts inherits the environment
variable STRAGGLERLAB_DRIVER=<pid>:<start ticks>; the next launch kills the
processes whose marking driver is gone (pid and start time checked, against
pid reuse) and nothing else. Ray processes started with a scrubbed
environment (its runtime-env agent) are found by RAY_NODE_ID instead, against
the node ids drivers noted (`record_ray_node`). `clean_residue` adds the
cgroups and network namespaces of dead runs: the `stragglerlab clean` verb.

    mark_driver()           # before ray.init
    clean_residue()         # `stragglerlab clean`, and at the start of every launch
    kill_orphans()          # at the start of every launch
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

MARK = "STRAGGLERLAB_DRIVER"
NODES_DIR = Path("/tmp/stragglerlab-ray-nodes")
"""Notes `<driver mark>.json`: the Ray node id each driver runs (see record_ray_node)."""


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def mark_driver() -> str:
    """Mark this process (and every process it starts from now on) as this driver's."""
    os.environ[MARK] = driver_mark()
    return os.environ[MARK]


def _marks() -> dict[int, tuple[str | None, str | None]]:
    """pid -> (driver mark, Ray node id) of every live process carrying either."""
    found, needle, node_needle = {}, f"{MARK}=".encode(), b"RAY_NODE_ID="
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        mark = node = None
        for item in env.split(b"\0"):
            if item.startswith(needle):
                mark = item[len(needle):].decode(errors="replace")
            elif item.startswith(node_needle):
                node = item[len(node_needle):].decode(errors="replace")
        if mark is not None or node is not None:
            found[int(entry.name)] = (mark, node)
    return found


def record_ray_node(node_id: str) -> Path | None:
    """Note that this driver runs Ray node `node_id` (after ray.init).

    Some Ray processes (the runtime-env agent) start with a scrubbed
    environment, so they lack the STRAGGLERLAB_DRIVER mark; they carry
    RAY_NODE_ID instead, and `kill_orphans` matches that against these notes.
    """
    mark = os.environ.get(MARK)
    if not mark or not node_id:
        return None
    try:
        NODES_DIR.mkdir(parents=True, exist_ok=True)
        path = NODES_DIR / f"{mark.replace(':', '-')}.json"
        path.write_text(json.dumps({"driver": mark, "node_id": node_id}))
    except OSError:
        return None
    return path


def forget_ray_node(note: Path | None) -> None:
    """Drop this driver's note once its Ray instance has shut down cleanly."""
    if note is not None:
        note.unlink(missing_ok=True)


def driver_mark() -> str:
    """This process's mark ("pid:start ticks"): a pid reused by another process later
    never passes for it (`driver_alive`)."""
    return f"{os.getpid()}:{_start_ticks(os.getpid())}"


def driver_alive(mark: str) -> bool:
    """The process a `driver_mark` names still runs (on this host)."""
    driver_pid, _, ticks = mark.partition(":")
    return driver_pid.isdigit() and _start_ticks(int(driver_pid)) == ticks


def _dead_nodes() -> dict[str, Path]:
    """Ray node id -> note, of drivers that are gone."""
    dead = {}
    for note in sorted(NODES_DIR.glob("*.json")) if NODES_DIR.is_dir() else []:
        try:
            rec = json.loads(note.read_text())
            mark, node = str(rec["driver"]), str(rec["node_id"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not driver_alive(mark):
            dead[node] = note
    return dead


def kill_orphans() -> list[int]:
    """SIGKILL marked processes whose driver is dead, and the processes of Ray nodes such a
    driver ran (RAY_NODE_ID); returns their pids."""
    killed = []
    own = os.environ.get(MARK)
    dead_nodes = _dead_nodes()
    for pid, (mark, node) in _marks().items():
        if pid == os.getpid() or (mark is not None and mark == own):
            continue
        if mark is not None and driver_alive(mark):
            continue  # its driver still runs: not ours to touch
        if mark is None and node not in dead_nodes:
            continue  # a Ray process of someone else's, or of a live run
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    for note in dead_nodes.values():
        note.unlink(missing_ok=True)
    return killed


def clean_residue(settle_s: float = 0.5) -> dict:
    """Reap everything a killed run left: orphaned Ray/rank processes, then the cgroups
    and network namespaces (with their veths and tc rules) of dead drivers.

    Touches only what carries our marks (the STRAGGLERLAB_DRIVER environment
    variable, the side files of stragglerlab.host.cgroups and .netns) and whose
    creator is dead; safe while other runs are going. Returns what was removed:
    {"processes": [pid, ...], "cgroups": [run id, ...], "netns": [run id, ...],
    "netns_skipped": reason or None}.
    """
    import time

    from stragglerlab.host import cgroups, netns

    killed = kill_orphans()
    if killed:  # a cgroup or namespace can only go once its processes are gone
        time.sleep(settle_s)
    report: dict = {"processes": killed, "cgroups": cgroups.cleanup_stale(), "netns": [],
                    "netns_skipped": None}
    try:
        report["netns"] = netns.cleanup_stale()
    except OSError as e:  # no iproute2 / no permission: no namespace of ours can exist then
        report["netns_skipped"] = str(e)
    return report
