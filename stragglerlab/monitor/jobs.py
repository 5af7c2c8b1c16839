"""The jobs one monitor watches: a registry of named jobs, each a run folder and its state.

One shape for every reader: the web server's overview page (`overview`), each
job's page (`get`), `/metrics` (`metrics_text`: every job's series labelled
`job_name`) and the loop (`fleet.py`) all read this registry; a monitor of one
run holds a registry of one job. Pure logic, no server, no files:

    reg = JobRegistry(FleetLimits(max_jobs=32))
    job = reg.add(Path("results/a/0"), MonitorState("results/a/0"), base=Path("results"))
    reg.overview()        # rows sorted by current S, highest first
    reg.metrics_text()    # Prometheus text, one `job_name` per job

Bounds: at most `max_jobs` jobs at once. A new run when the registry is full takes
the place of the job that ended first (its history stays in its run folder); when
none has ended it is refused and counted (`stragglerlab_jobs_refused_total`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from stragglerlab.monitor.metrics import jobs_metrics_text
from stragglerlab.monitor.state import MonitorState
from stragglerlab.util.errors import InputError

NAME_MAX_CHARS = 64
"""Longest job name (a label value and a URL path segment)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(kw_only=True)
class FleetLimits:
    """What bounds a monitor of several jobs (its memory and its /metrics series)."""

    max_jobs: int = 32
    """Jobs watched at once (--max-jobs); a new run beyond it replaces an ended job, or is
    refused while none has ended."""
    max_worker_series: int = 1024
    """`stragglerlab_worker_slowdown` series per job (--max-worker-series): a larger job
    exports its highest-scored workers only."""

    def check(self) -> None:
        """InputError for a bound that cannot hold a job."""
        if self.max_jobs < 1:
            raise InputError(f"--max-jobs {self.max_jobs}: must be >= 1 (e.g. 32)")
        if self.max_worker_series < 1:
            raise InputError(f"--max-worker-series {self.max_worker_series}: must be >= 1 "
                             "(e.g. 1024)")


@dataclass(kw_only=True)
class Job:
    """One watched run."""

    name: str
    """Its `job_name`: unique in the registry, [A-Za-z0-9_.-] only (a label value and the
    page's path, /jobs/NAME/)."""
    run: Path
    """The run folder."""
    state: MonitorState
    """What its monitor published (history, layout, finished)."""
    order: int
    """When it was added (0 first): the job that ended first is replaced first."""


def job_name(run: Path, base: Path | None = None) -> str:
    """A job's name from its run folder: the path below `base` (else the folder's last two
    parts, e.g. `slow-worker-1/0`), '/' and other characters outside [A-Za-z0-9_.-]
    made '-' (one for a run of them), at most NAME_MAX_CHARS characters (the end kept)."""
    run = Path(run)
    parts: tuple[str, ...] = ()
    if base is not None:
        try:
            parts = run.resolve().relative_to(Path(base).resolve()).parts
        except ValueError:
            parts = ()
    if not parts:
        parts = tuple(p for p in run.resolve().parts[-2:] if p not in ("/", ""))
    name = re.sub(r"-{2,}", "-", _UNSAFE.sub("-", "-".join(parts))).strip("-.") or "job"
    return name[-NAME_MAX_CHARS:].lstrip("-.") or "job"


class JobRegistry:
    """The watched jobs by name, in the order they were added."""

    def __init__(self, limits: FleetLimits | None = None) -> None:
        self.limits = limits or FleetLimits()
        self.limits.check()
        self.lock = threading.Lock()
        self.jobs: dict[str, Job] = {}
        self.refused = 0
        """New runs refused (each once) because the registry was full, none ended."""
        self._added = 0

    def unique_name(self, run: Path, base: Path | None = None) -> str:
        """`job_name(run, base)`, with -2, -3, ... when another job has that name."""
        name = job_name(run, base)
        with self.lock:
            taken, n, out = set(self.jobs), 2, name
            while out in taken:
                out, n = f"{name}-{n}", n + 1
            return out

    def has_room(self) -> bool:
        """Whether `add` would take a new job now (fewer than max_jobs, or one ended)."""
        with self.lock:
            return len(self.jobs) < self.limits.max_jobs or any(
                j.state.summary()["finished"] for j in self.jobs.values())

    def refuse(self) -> None:
        """Count a run not watched for want of room."""
        with self.lock:
            self.refused += 1

    def add(self, run: Path, state: MonitorState, name: str | None = None,
            base: Path | None = None) -> tuple[Job | None, Job | None]:
        """Register a run: (the new job, the ended job it replaced) or, when the registry
        is full and no job has ended, (None, None) and the refusal counted."""
        name = name or self.unique_name(run, base)
        with self.lock:
            if name in self.jobs:
                raise ValueError(f"job name {name!r} is taken")
            evicted = None
            if len(self.jobs) >= self.limits.max_jobs:
                ended = [j for j in self.jobs.values() if j.state.summary()["finished"]]
                if not ended:
                    self.refused += 1
                    return None, None
                evicted = min(ended, key=lambda j: j.order)
                del self.jobs[evicted.name]
            job = Job(name=name, run=Path(run), state=state, order=self._added)
            self._added += 1
            self.jobs[name] = job
            return job, evicted

    def get(self, name: str) -> Job | None:
        """The job of that name, or None."""
        with self.lock:
            return self.jobs.get(name)

    def all(self) -> list[Job]:
        """Every job, in the order added."""
        with self.lock:
            return list(self.jobs.values())

    def overview(self) -> list[dict]:
        """One row per job for the overview page, highest current S first (jobs with no
        window yet last, by name): name, run, S, findings, last step, counts, status."""
        rows = []
        for job in self.all():
            s, w = job.state.summary(), job.state.latest_window()
            findings = [{"cause": f["cause"], "ranks": [[r["dp_rank"], r["stage"]]
                                                        for r in f.get("ranks") or []],
                         "estimated_slowdown": f.get("estimated_slowdown")}
                        for f in (w or {}).get("findings") or []]
            status = ("run ended" if s["run_ended"] else "stopped") if s["finished"] \
                else "live"
            rows.append({"name": job.name, "run": str(job.run), "status": status,
                         "slowdown": None if w is None else w.get("slowdown"),
                         "valid": None if w is None else w.get("valid"),
                         "findings": findings, "last_step": None if w is None else w["step"],
                         "windows_analysed": s["windows_analysed"], "errors": s["errors"],
                         "layout": s["layout"]})
        rows.sort(key=lambda r: (r["slowdown"] is None, -(r["slowdown"] or 0.0),
                                 -len(r["findings"]), r["name"]))
        return rows

    def metrics_text(self) -> str:
        """Prometheus text of every job, labelled `job_name` (metrics.jobs_metrics_text)."""
        rows = []
        for job in self.all():
            s = job.state.summary()
            rows.append((job.name, job.state.latest_window(), s["windows_analysed"],
                         s["errors"], s["nodes"]))
        return jobs_metrics_text(rows, self.limits.max_worker_series, self.refused)
