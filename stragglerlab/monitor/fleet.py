"""One monitor for many jobs: a `Monitor` per run folder, on one loop, in one registry.

    fleet = Fleet(base_cfg, runs=[Path("results/a/0"), Path("results/b/0")],
                  watch=Path("results"), limits=FleetLimits(max_jobs=32), log=print)
    fleet.run(stop_event)     # until every run ended (no --watch) or stop is set
    fleet.registry            # what the server shows (jobs.JobRegistry)

Each job is today's single-run monitor (its own tail, window history in
RUN/monitor/windows.jsonl, lock and alerts, named by its `job_name`), polled in
turn on this thread: windows of different jobs are analysed one after another,
so the lag of each grows with the number of jobs that have a new step at once.
`watch` is a folder searched for new run folders at every look: a folder up to
WATCH_DEPTH levels below it that holds `trace-parts/` or `trace.parquet`
(results/SCENARIO/TRIAL is two), or an unannotated import's `ops.parquet`
(replayed window by window: import_replay.py). A job that fails (its folder deleted, another
monitor holding its lock) is reported and stops; the other jobs go on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

from stragglerlab.monitor.config import MIN_POLL_S, MonitorConfig
from stragglerlab.monitor.import_replay import monitor_for
from stragglerlab.monitor.jobs import FleetLimits, JobRegistry
from stragglerlab.monitor.news import status_mark, wait_for_news
from stragglerlab.monitor.runner import Monitor
from stragglerlab.monitor.state import MonitorState
from stragglerlab.run.general_record import OPS_PARQUET
from stragglerlab.run.run_folder import MONITOR_DIR, TRACE_PARQUET, TRACE_PARTS_DIR
from stragglerlab.util.errors import InputError

WATCH_DEPTH = 3
"""How deep below a watched folder a run folder is looked for."""


def find_runs(watch: Path, depth: int = WATCH_DEPTH) -> list[Path]:
    """Run folders below `watch` (at most `depth` levels): folders holding trace-parts/,
    trace.parquet or an import's ops.parquet, not below another run folder, sorted by path."""
    found: list[Path] = []
    level = [Path(watch)]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                children = sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())
            except OSError:
                continue
            for c in children:
                if c.name in (MONITOR_DIR, TRACE_PARTS_DIR):
                    continue
                if (c / TRACE_PARTS_DIR).is_dir() or (c / TRACE_PARQUET).is_file() \
                        or (c / OPS_PARQUET).is_file():
                    found.append(c)
                else:
                    nxt.append(c)
        level = nxt
    return found


class Fleet:
    """Several runs watched by one process: their monitors, polled in turn."""

    def __init__(self, base: MonitorConfig, runs: list[Path] | None = None,
                 watch: Path | None = None, limits: FleetLimits | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        base.check()
        self.base = base
        self.runs = [Path(r) for r in runs or []]
        self.watch = None if watch is None else Path(watch)
        self.registry = JobRegistry(limits)
        self._say = log or (lambda _m: None)
        self.monitors: dict[str, Monitor] = {}
        """Monitors of the registry's jobs still being watched, by job name."""
        self.done: dict[str, Monitor] = {}
        """Monitors stopped (their run ended, or they failed), by job name."""
        self.known: set[Path] = set()
        """Run folders seen (watched, refused or failed), resolved: each is tried once."""
        self.failed: dict[str, str] = {}
        """Run folder -> why it could not be watched."""
        self.waiting: list[Path] = []
        """Run folders refused for want of room (--max-jobs), tried again, oldest first,
        once a watched job has ended."""

    def log(self, msg: str) -> None:
        self._say(msg)

    # -- jobs -----------------------------------------------------------------------
    def discover(self) -> None:
        """Start watching the --runs not yet watched and the new run folders in --watch."""
        while self.waiting and self.registry.has_room():
            self._add(self.waiting.pop(0))
        found = list(self.runs)
        if self.watch is not None:
            found += find_runs(self.watch)
        for run in found:
            key = run.resolve()
            if key in self.known:
                continue
            self.known.add(key)
            if self.waiting or not self.registry.has_room():
                self.waiting.append(run)
                self.registry.refuse()
                self.log(f"{run}: not watched yet: {self.registry.limits.max_jobs} jobs are "
                         "watched and none has ended (--max-jobs); it is once one ends")
                continue
            self._add(run)

    def _add(self, run: Path) -> None:
        base = self.watch if self.watch is not None and _below(run, self.watch) else None
        name = self.registry.unique_name(run, base)
        cfg = dataclasses.replace(self.base, run=run, job_name=name)
        state = MonitorState(str(run))
        try:
            if not run.is_dir():
                raise InputError("not a folder (a run folder `stragglerlab train` writes)",
                                 str(run))
            mon = monitor_for(cfg, log=lambda m, n=name: self.log(f"[{n}] {m}"),
                              state=state)
        except InputError as e:
            self._fail(run, str(e))
            return
        job, evicted = self.registry.add(run, state, name=name)
        if job is None:  # has_room said there was: cannot happen on this one thread
            mon.sender.close()
            self.waiting.append(run)
            return
        try:
            mon.open()
        except InputError as e:
            with self.registry.lock:
                self.registry.jobs.pop(name, None)
            mon.sender.close()
            self._fail(run, str(e))
            return
        if evicted is not None:
            self.done.pop(evicted.name, None)
            self.log(f"{evicted.name}: ended; its place goes to {name} (--max-jobs "
                     f"{self.registry.limits.max_jobs}; its history stays in {evicted.run})")
        self.monitors[name] = mon
        self.log(f"watching {run} as job {name}")

    def _fail(self, run: Path, why: str) -> None:
        self.failed[str(run)] = why
        self.log(f"{run}: not watched: {why}")

    # -- the loop -------------------------------------------------------------------
    def poll(self) -> int:
        """One look at every job still watched; the windows analysed."""
        n = 0
        for name, mon in list(self.monitors.items()):
            ended = mon.ended
            try:
                mon._check_folder()
                n += len(mon.poll())
            except (InputError, OSError) as e:  # this job's folder went away: it alone stops
                mon.log(f"error: {e}; this job is no longer watched")
                self._stop(name)
                continue
            if ended:
                mon.log("the run ended (run.json written); stopping its watch")
                self._stop(name)
        return n

    def _stop(self, name: str) -> None:
        mon = self.monitors.pop(name)
        mon.close()
        self.done[name] = mon

    @property
    def finished(self) -> bool:
        """Nothing left to watch: no --watch, and every run ended or failed (none waits)."""
        return self.watch is None and not self.monitors and not self.waiting

    def run(self, stop: threading.Event | None = None, once: bool = False) -> int:
        """Look until every run ended (no --watch), `stop` is set, or once; the windows
        analysed."""
        stop = stop or threading.Event()
        n = 0
        try:
            while True:
                self.discover()
                n += self.poll()
                if once or stop.is_set() or self.finished:
                    break
                wait_for_news(stop, max(self.base.poll_s, MIN_POLL_S), lambda: tuple(
                    status_mark(Path(m.cfg.run)) for m in self.monitors.values()))
        finally:
            self.close()
        return n

    def close(self) -> None:
        """Stop every job still watched (their state says so, their alerts are sent)."""
        for name in list(self.monitors):
            self._stop(name)

    def all_monitors(self) -> dict[str, Monitor]:
        """Every job's monitor, watched or stopped, by name."""
        return {**self.done, **self.monitors}


def _below(run: Path, folder: Path) -> bool:
    try:
        run.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False
