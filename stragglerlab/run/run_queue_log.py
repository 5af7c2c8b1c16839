"""Per-rank, per-step CPU run-queue wait: the host interference a run actually met.

A training rank on a shared host can be slowed by something nobody injected: another
process competing for its core, a burst of the host's own work. Such a rank is a real
straggler, and a detector that names it is right, yet the scenario's faults.json says
the run was clean. To keep ground truth honest, each rank measures, per step, how long
its threads were runnable but not running (Linux schedstat `run_delay`, summed over the
process's threads; it includes CFS quota throttling, which every rank of a run carries
alike unless an injector cuts one), and the ground truth turns a rank's wait over its
peers' into observed interference (stragglerlab.analysis.interference).

One JSON object per line in `cpu/rank<r>.jsonl`, appended at each step end (a killed
run keeps its finished steps; a torn last line is dropped on read):

    {"step": 7, "cpu_s": 0.91, "wait_s": 0.12, "wall_s": 1.04, "host_busy_s": 1.93}

`host_busy_s` is the whole host's busy CPU time over the step (/proc/stat), so the
host's load from outside the run is host_busy_s minus the ranks' cpu_s (`foreign_cores`).
Under CFS quotas (`run.cpu_isolation`) `wait_s` is mostly quota throttling, alike on
every rank: measured on a quiet clean DP 2 x PP 2 run, one rank's wait over the median
rank's swings by +-20 % of a step from step to step, so it is kept as a record of what
happened, not read as a per-rank interference signal.

    totals = thread_totals()            # (cpu_s, wait_s) of this process, or None
    host_busy_s()                       # busy CPU-seconds of the host since boot, or None
    append_records(path, [record, ...]); read_records(path)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

SCHEDSTAT_GLOB = "/proc/self/task"
"""Where each thread's `schedstat` (on-CPU ns, run-queue wait ns, timeslices) lives."""


@dataclass(frozen=True, kw_only=True)
class StepWait:
    """One rank's CPU time and run-queue wait over one step."""

    step: int
    """Step number (the engine's, warm-up steps included)."""
    cpu_s: float
    """CPU time its threads got during the step, seconds."""
    wait_s: float
    """Time its threads were runnable but waiting for a CPU (or throttled), seconds,
    summed over threads."""
    wall_s: float
    """Wall time of the step on this rank, seconds."""
    host_busy_s: float | None = None
    """Busy CPU time of the whole host (every core) over the step, seconds; None where
    /proc/stat is absent."""


def thread_totals(task_dir: str = SCHEDSTAT_GLOB) -> tuple[float, float] | None:
    """(cpu_s, wait_s) summed over this process's threads; None where schedstat is absent
    (not Linux, or a kernel without CONFIG_SCHED_INFO)."""
    cpu = wait = 0
    found = False
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/schedstat") as f:
                fields = f.read().split()
            cpu += int(fields[0])
            wait += int(fields[1])
            found = True
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between listdir and open
    return (cpu / 1e9, wait / 1e9) if found else None


def host_busy_s(stat_path: str = "/proc/stat") -> float | None:
    """Busy CPU-seconds of the host since boot (all cores: everything but idle and
    iowait), or None where /proc/stat cannot be read."""
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def foreign_cores(records_by_rank: list[list[StepWait]]) -> dict[int, float]:
    """Per step with a record on every rank: the host's busy CPU over the step that the
    ranks did not use, in cores (host_busy_s - sum of cpu_s, over the median wall time).
    What other processes (Ray, the driver, other users) took from the host meanwhile."""
    by_step = [{w.step: w for w in recs if w.host_busy_s is not None}
               for recs in records_by_rank]
    steps = set.intersection(*(set(d) for d in by_step)) if by_step else set()
    out = {}
    for step in sorted(steps):
        rows = [d[step] for d in by_step]
        wall = sorted(w.wall_s for w in rows)[len(rows) // 2]
        busy = max(w.host_busy_s for w in rows)  # every rank sees the same host
        out[step] = max(busy - sum(w.cpu_s for w in rows), 0.0) / max(wall, 1e-9)
    return out


def append_records(path: str | Path, records: list[StepWait]) -> None:
    """Append records, one JSON line each."""
    if not records:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("".join(json.dumps(asdict(r)) + "\n" for r in records))


def read_records(path: str | Path) -> list[StepWait]:
    """The records of one rank's log; [] when missing. A torn or malformed line ends the
    read (what follows it cannot be trusted to be in order)."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines:
        try:
            d = json.loads(line)
            busy = d.get("host_busy_s")
            rec = StepWait(step=int(d["step"]), cpu_s=float(d["cpu_s"]),
                           wait_s=float(d["wait_s"]), wall_s=float(d["wall_s"]),
                           host_busy_s=None if busy is None else float(busy))
        except (ValueError, TypeError, KeyError, AttributeError):
            break
        values = (rec.cpu_s, rec.wait_s, rec.wall_s,
                  0.0 if rec.host_busy_s is None else rec.host_busy_s)
        if not all(v == v and 0.0 <= v < 1e7 for v in values):
            break  # NaN or absurd: a damaged log, not a measurement
        out.append(rec)
    return out
