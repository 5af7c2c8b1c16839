"""Processes a killed run leaves behind: mark them at launch, kill them at the next start.

A driver SIGKILLed mid-run cannot shut its Ray instance down, so its raylet,
GCS and rank actors may outlive it (cgroups and namespaces have their own
`cleanup_stale`). Every process the driver starts inherits the environment
variable STRAGGLERLAB_DRIVER=<pid>:<start ticks>; the next launch kills the
processes whose marking driver is gone (pid and start time checked, against
pid reuse) and nothing else.

    mark_driver()           # before ray.init
    kill_orphans()          # at the start of every launch
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

MARK = "STRAGGLERLAB_DRIVER"


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def mark_driver() -> str:
    """Mark this process (and every process it starts from now on) as this driver's."""
    os.environ[MARK] = f"{os.getpid()}:{_start_ticks(os.getpid())}"
    return os.environ[MARK]


def _marks() -> dict[int, str]:
    """pid -> driver mark of every marked live process."""
    found, needle = {}, f"{MARK}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(needle):
                found[int(entry.name)] = item[len(needle):].decode(errors="replace")
                break
    return found


def kill_orphans() -> list[int]:
    """SIGKILL marked processes whose driver is dead; returns their pids."""
    killed = []
    own = os.environ.get(MARK)
    for pid, mark in _marks().items():
        if pid == os.getpid() or mark == own:
            continue
        driver_pid, _, ticks = mark.partition(":")
        if driver_pid.isdigit() and _start_ticks(int(driver_pid)) == ticks:
            continue  # its driver still runs: not ours to touch
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed
