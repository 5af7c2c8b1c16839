"""The monitor's loop: tail the parts, analyse each new complete step's window, publish.

    monitor = Monitor(MonitorConfig(run=Path("results/x/0")), log=print)
    monitor.poll()            # one look: analyse what completed since the last
    monitor.run(stop_event)   # until the run ends (run.json) or stop is set

Every window (and every error: a garbage part, a layout that cannot be told, a
failed analysis) is appended to monitor/windows.jsonl and to the in-memory
`MonitorState` the web server reads. A restarted monitor reads the history
back and resumes after its last analysed step; its alert state is replayed
from the history, so a restart raises no alert twice.

On a cluster run, `nodes.json` (monitor.nodes) gives each rank's clock
correction, applied to its records as they are read, and the nodes found lost:
each is recorded once, and from then on the windows cover the ranks that remain
(the lost ranks' pipelines left out, the window renumbered for the what-if and
its results mapped back to the job's DP ranks), and say so in `note`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from stragglerlab.monitor.alerts import AlertSender, AlertTracker
from stragglerlab.monitor.config import (
    LOCK_FILE,
    LOG_FILE,
    MIN_POLL_S,
    WINDOWS_JSONL,
    MonitorConfig,
)
from stragglerlab.monitor.gclog import GcTail
from stragglerlab.monitor.history import (
    append_line,
    last_step,
    read_lines,
    resumable,
    settings_conflict,
)
from stragglerlab.monitor.jobs import job_name
from stragglerlab.monitor.news import status_mark, wait_for_news
from stragglerlab.monitor.nodes import NodesView
from stragglerlab.monitor.state import MonitorState
from stragglerlab.monitor.steps import StepBuffer, infer_layout, records_frame
from stragglerlab.monitor.tail import PartsTail
from stragglerlab.monitor.window import analyse_window, error_line, make_detectors
from stragglerlab.run.run_folder import STATUS_DIR, TRACE_PARTS_DIR, RunFolder
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.validate import validate_trace
from stragglerlab.util.errors import InputError


class Monitor:
    """One run folder watched: its tail, step buffer, history, alerts and published state."""

    def __init__(self, cfg: MonitorConfig, log: Callable[[str], None] | None = None,
                 state: MonitorState | None = None) -> None:
        cfg.check()
        self.cfg = cfg
        self.folder = RunFolder(path=cfg.run)
        self._say = log or (lambda _m: None)
        self.detectors = make_detectors(cfg.detectors, cfg.noise_floor)
        self.tail = PartsTail(cfg.run)
        self.nodes = NodesView(cfg.run)
        self.gc = GcTail(cfg.run)
        self.buffer = StepBuffer(cfg.window_steps)
        self.windows_path = cfg.monitor_dir / WINDOWS_JSONL
        lines = [x for x in read_lines(self.windows_path) if resumable(x)]
        # Resumed windows of other settings would be reported as this monitor's: refused.
        conflict = settings_conflict(lines, {
            "window_steps": cfg.window_steps, "warmup_steps": cfg.warmup_steps,
            "dp_size": cfg.dp, "pp_size": cfg.pp})
        if conflict:
            raise InputError(conflict, str(cfg.run))
        self.last_step = last_step(lines)
        self.first_step = min((w["steps"][0] for w in lines if w.get("kind") == "window"
                               and isinstance(w.get("steps"), list) and w["steps"]),
                              default=None)
        """The first step this monitor analysed (a window's detectors take it for the
        run's start: a regime from there has no onset that the monitor saw)."""
        self.state = state or MonitorState(str(cfg.run))
        self.state.load(lines)
        self.job_name = cfg.job_name or job_name(cfg.run)
        """The job's name in its alerts."""
        self.tracker = AlertTracker(str(cfg.run), cfg.slowdown_alert, cfg.clear_after_windows,
                                    self.job_name)
        for w in lines:  # the alert state as it stood (no alert twice across a restart)
            if w.get("kind") == "window":
                self.tracker.observe(w)
        self.sender = AlertSender(cfg, self.log)
        self.meta: JobMeta | None = None
        self.from_parquet = False
        self.reported: set[str] = {d["message"] for d in lines if d.get("kind") == "error"}
        self.found_at = time.time()
        self.status: dict[int, int] = {}
        self._status_seen: dict = {}
        """status/ files as last read (RunFolder.status skips the unchanged ones)."""
        """status/rank<r>.json's last finished step by rank, as of the last look."""
        if self.last_step >= 0:
            self.log(f"resuming after step {self.last_step} ({len(lines)} history lines)")

    # -- output -----------------------------------------------------------------------
    def log(self, msg: str) -> None:
        """A line to the caller's log and to monitor/monitor.log."""
        self._say(msg)
        try:
            self.cfg.monitor_dir.mkdir(parents=True, exist_ok=True)
            with open(self.cfg.monitor_dir / LOG_FILE, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}\n")
        except OSError:
            pass  # the log is best effort; windows.jsonl is the record

    def _record(self, line: dict) -> None:
        append_line(self.windows_path, line)
        self.state.add(line)

    def error(self, message: str, step: int | None = None, rank: int | None = None) -> None:
        """Record an error once (history, page, log); the monitor goes on."""
        if message in self.reported:
            return
        self.reported.add(message)
        self.log(f"error: {message}")
        self._record(error_line(step, message, rank))

    # -- one look ---------------------------------------------------------------------
    @property
    def ended(self) -> bool:
        """The run ended: run.json is written (or only its trace.parquet is there)."""
        return self.folder.has_record or self.from_parquet

    def _parquet(self) -> dict:
        """A folder with trace.parquet and no trace parts (a finished run whose parts were
        cleaned, a `synth` or `import` output): its trace, read once, as parts' records."""
        if self.from_parquet or self.tail.dir.is_dir() or not self.folder.has_trace:
            return {}
        from stragglerlab.monitor.feed import trace_records

        self.from_parquet = True
        self.log(f"no trace parts: reading the finished trace {self.folder.trace_path}")
        try:
            df, dp = self.folder.trace(), self.folder.meta.dp_size
            # Trace parts are named by rank = stage * dp + dp_rank (the testbed's order); a
            # trace numbered otherwise (an import's, edited) is read by its (dp_rank, stage).
            testbed = df["stage"].astype("int64") * dp + df["dp_rank"].astype("int64")
            if (df["rank"].astype("int64") != testbed).any():
                self.log("the trace's ranks are not numbered stage * dp + dp_rank: read by "
                         "each row's (dp_rank, stage)")
                df = df.assign(rank=testbed)
            return trace_records(df)
        except InputError as e:
            self.error(str(e))
            return {}

    def poll(self) -> list[dict]:
        """Read what is new, analyse each newly complete step's window; the new windows."""
        # Before reading the parts: a rank writes its status after flushing the step, and a
        # run its run.json after every rank ended, so what they say is then all on disk.
        ended = self.ended
        status = self._status()
        problem = self.nodes.refresh()
        if problem:
            self.error(problem)
        new = self._parquet() or self.nodes.correct(self.tail.poll())
        self.gc.poll()  # after the parts: a step's pauses are flushed before its status
        ended = ended or self.from_parquet
        self.found_at = time.time()  # a step found complete now: its wall-clock lag starts
        self.buffer.add(new)
        for rank, msg in self.tail.errors.items():
            self.error(msg, rank=rank)
        self.status = status
        meta = self._layout(ended, status)
        if meta is None:
            return []
        ranks = self._counted_ranks(meta)
        if not ranks:
            return []
        through = self.buffer.complete_through(ranks, status, ended)
        steps = self.buffer.steps_through(through, self.last_step, self._warmup(), ranks)
        out = []
        for step in steps:
            window = [s for s in self.buffer.steps_through(step, -1, self._warmup(), ranks)
                      ][-self.cfg.window_steps:]
            out += self._analyse(window, meta)
            self.last_step = step
        if steps:
            self.buffer.prune(self.last_step - self.cfg.window_steps + 1)
            self.gc.prune(self.last_step - self.cfg.window_steps + 1)
        return out

    def _analyse(self, steps: list[int], meta: JobMeta) -> list[dict]:
        step = steps[-1]
        try:
            kept_dp = self._kept_dp(meta)
            df, sub, rank_of = self._frame(steps, meta, kept_dp)
            if not self.from_parquet:  # a finished trace.parquet has its own column
                self.gc.add_column(df, self.nodes.correction, rank_of)
                # trace.parquet is checked when read; parts are checked record by record
                # only, so a window of them gets the trace's checks too (a rank's untimed
                # compute named a healthy worker before).
                validate_trace(df, sub, str(self.cfg.run / TRACE_PARTS_DIR))
            first = steps[0] if self.first_step is None else min(self.first_step, steps[0])
            line = analyse_window(df, sub, self.detectors, str(self.cfg.run),
                                  testbed=self._testbed(), window_steps=self.cfg.window_steps,
                                  first_step=first)
            self.first_step = first
            if kept_dp is not None:
                restore_dp_ranks(line, kept_dp, meta.dp_size, sorted(self._lost()))
        except InputError as e:
            self.error(f"window of steps {steps[0]}-{step} could not be analysed: {e}", step)
            return []
        except Exception as e:  # noqa: BLE001 - one window's failure is recorded, not fatal
            self.error(f"window of steps {steps[0]}-{step} could not be analysed: "
                       f"{type(e).__name__}: {e}", step)
            return []
        now_wall, now_mono = time.time(), time.monotonic()
        line["lag_s"] = round(now_wall - self.found_at, 4)
        end = self.buffer.step_end.get(step)
        lag = None if end is None else now_mono - end
        line["lag_from_step_end_s"] = round(lag, 4) if lag is not None and 0 <= lag < 3600 \
            else None
        line["time"] = round(now_wall, 3)
        # The settings it was analysed with: a resumed monitor must use the same ones.
        line["window_steps"], line["warmup_steps"] = self.cfg.window_steps, self._warmup()
        self._record(line)
        for alert in self.tracker.observe(line):
            self.log(f"alert: {alert['event']} at step {step}"
                     + (f" ({alert['finding']['cause']})" if alert["finding"] else ""))
            self.sender.send(alert)
        return [line]

    # -- a cluster run's lost nodes --------------------------------------------------------
    def _lost(self) -> set[int]:
        return {r for ranks in self.nodes.lost_ranks().values() for r in ranks}

    def _counted_ranks(self, meta: JobMeta) -> list[int]:
        """The ranks a step waits for: all, less the lost nodes' ([]: windows cannot go on).
        Each lost node is recorded once (history, page, log)."""
        world = meta.dp_size * meta.pp_size
        self.state.set_nodes(self.nodes.summary())
        lost = self._lost()
        if not lost:
            return list(range(world))
        kept_dp = self._kept_dp(meta)
        kept = [r for r in range(world) if r not in lost]
        for nid, ranks in self.nodes.lost_ranks().items():
            how = (f"the windows go on with the {len(kept_dp) * meta.pp_size} ranks that "
                   f"remain (DP ranks {kept_dp})" if kept_dp else
                   "the windows stop: the what-if needs whole pipelines, and the ranks that "
                   "remain are not (the run itself fails on a lost node)")
            self.error(f"node {nid} lost with ranks {ranks}: {how}", self.last_step)
        return [r for r in kept if r % meta.dp_size in kept_dp] if kept_dp else []

    def _kept_dp(self, meta: JobMeta) -> list[int] | None:
        """The DP ranks whose whole pipeline remains (None: no node lost; []: none does)."""
        lost = self._lost()
        if not lost:
            return None
        return [d for d in range(meta.dp_size)
                if not any(s * meta.dp_size + d in lost for s in range(meta.pp_size))]

    def _frame(self, steps: list[int], meta: JobMeta, kept_dp: list[int] | None):
        """The window's frame, its layout and the frame's rank -> the job's rank (None:
        the job's own ranks). After a lost node: the remaining pipelines, renumbered as a
        job of len(kept_dp) DP ranks."""
        if kept_dp is None:
            return self.buffer.frame(steps, meta), meta, None
        dp, n = meta.dp_size, len(kept_dp)
        raw = self.buffer.raw(steps)
        rank_of = {s * n + i: s * dp + d for s in range(meta.pp_size)
                   for i, d in enumerate(kept_dp)}
        df = records_frame({r: raw[orig] for r, orig in rank_of.items() if orig in raw}, n)
        return df, replace(meta, dp_size=n, world_size=n * meta.pp_size), rank_of

    # -- what the run folder says -----------------------------------------------------
    def _testbed(self) -> bool:
        return self.folder.has_record or (self.cfg.run / STATUS_DIR).is_dir()

    def _warmup(self) -> int:
        if self.cfg.warmup_steps is not None:
            return self.cfg.warmup_steps
        if self.folder.has_record:
            try:
                return int(self.folder.record.scenario.get("run", {}).get("warmup_steps", 0))
            except (InputError, TypeError, ValueError):  # run.json's reader checks `run`'s type
                return 0
        return 0

    def _status(self) -> dict[int, int]:
        try:
            return self.folder.last_step_by_rank(self._status_seen)
        except InputError as e:
            self.error(str(e))
            return {}

    def _layout(self, ended: bool, status: dict[int, int]) -> JobMeta | None:
        """The job's layout: meta.yaml, else --dp/--pp, else inferred from the parts."""
        if self.meta is not None:
            return self.meta
        name = Path(self.cfg.run).name
        if self.folder.has_meta:
            try:
                self.meta = RunFolder(path=self.cfg.run).meta
            except InputError as e:
                self.error(str(e))
                return None
        elif self.cfg.dp and self.cfg.pp:
            self.meta = JobMeta(dp_size=self.cfg.dp, pp_size=self.cfg.pp, trial_name=name)
        else:
            world = len(self.tail.ranks)
            through = self.buffer.complete_through(world, status, ended)
            first = self.buffer.steps_through(through, -1, 0)
            if not first:
                return None
            layout = infer_layout(self.buffer.raw(first[:1]))
            if isinstance(layout, str):  # live, a rank's file may not be there yet: wait
                if ended:
                    self.error(f"job layout: {layout}")
                return None
            dp, pp = (self.cfg.dp or layout[0], self.cfg.pp or layout[1])
            self.meta = JobMeta(dp_size=dp, pp_size=pp, trial_name=name)
            self.log(f"job layout inferred from the trace parts: dp={dp} pp={pp}")
        self.state.set_layout(self.meta.dp_size, self.meta.pp_size)
        return self.meta

    # -- why nothing was analysed -----------------------------------------------------
    def idle_reason(self) -> tuple[str, bool]:
        """Why the looks so far analysed no window, and whether the user's flag is to blame
        (the run ended and the --warmup-steps given leaves out every step it completed)."""
        missing = self._missing_ranks()
        if missing:
            return missing, False
        warmup = self._warmup()
        done = self._complete_steps()
        if done and done[-1] < warmup:
            given = self.cfg.warmup_steps is not None
            what = f"--warmup-steps {warmup}" if given else \
                f"the scenario's warm-up ({warmup} steps, run.json)"
            return (f"{what} leaves out every step the run completed (steps {done[0]}-"
                    f"{done[-1]}); pass --warmup-steps {done[-1]} or less"), given and self.ended
        return (f"no complete step past the warm-up ({warmup} step(s)) in its trace parts "
                "(trace-parts/rank<r>.bin, written by train as each step ends)"), False

    def _complete_steps(self) -> list[int]:
        """The buffered steps every rank completed, warm-up or not ([]: layout unknown)."""
        if self.meta is None:
            return []
        world = self.meta.dp_size * self.meta.pp_size
        through = self.buffer.complete_through(world, self.status, self.ended)
        return self.buffer.steps_through(through, -1, 0)

    def _missing_ranks(self) -> str:
        """The ranks whose trace part holds no record yet, named ('' when none is: a run
        read from its trace.parquet, or every rank of the layout has records)."""
        if self.from_parquet:
            return ""
        have = set(self.buffer.last_step)
        world = self.meta.dp_size * self.meta.pp_size if self.meta is not None else \
            max(have, default=-1) + 1
        missing = [r for r in range(world) if r not in have]
        if not missing:
            return "" if world else (f"no rank's trace part in {TRACE_PARTS_DIR}/ (rank<r>"
                                     ".bin, written by train as each step ends) and no "
                                     "trace.parquet")
        shown = ", ".join(f"rank{r}.bin" for r in missing[:4])
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        return (f"no records in the trace part of {len(missing)} of {world} ranks "
                f"({TRACE_PARTS_DIR}/{shown}{more}: missing or empty), and a step is "
                "complete only once every rank recorded it")

    # -- the loop ---------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None, once: bool = False) -> int:
        """Poll until the run ended and everything is analysed, `stop` is set, or once;
        returns the windows analysed."""
        stop = stop or threading.Event()
        n = 0
        self.open()
        try:
            while True:
                ended = self.ended
                try:
                    self._check_folder()
                    n += len(self.poll())
                except OSError:
                    self._check_folder()  # deleted mid-look: say so
                    raise
                if once or stop.is_set():
                    break
                if ended:
                    self.log("the run ended (run.json written); stopping")
                    break
                wait_for_news(stop, max(self.cfg.poll_s, MIN_POLL_S),
                              lambda: status_mark(Path(self.cfg.run)))
        finally:
            self.close()
        return n

    def open(self) -> None:
        """Check the folder and take its monitor lock (InputError when another monitor
        holds it); `close` releases it. `run` does both; a monitor of several jobs
        (fleet.py) calls them around its own loop."""
        self._check_folder()
        self._held = self._lock()

    def close(self) -> None:
        """Publish that the loop stopped, deliver queued alerts, release the lock."""
        self.state.finish(self.ended)
        self.sender.close()
        held, self._held = getattr(self, "_held", None), None
        if held is not None:
            held.close()

    def _check_folder(self) -> None:
        """InputError when the run folder went away while watched."""
        if not self.cfg.run.is_dir():
            raise InputError("the run folder is gone (deleted while the monitor watched "
                             "it); the history written so far went with it", str(self.cfg.run))

    def _lock(self):
        """monitor/monitor.lock, held while this monitor runs (stragglerlab.util.folder_lock, the
        verbs' one lock): a second monitor on the same run would write the same history
        twice; it is refused (InputError). Returns what `close()` releases."""
        from contextlib import ExitStack

        from stragglerlab.util.folder_lock import hold

        held = ExitStack()
        held.enter_context(hold(self.cfg.monitor_dir, "monitor", name=LOCK_FILE,
                                hint="stop it first, or open its page"))
        return held


def restore_dp_ranks(line: dict, kept_dp: list[int], dp: int, lost: list[int]) -> None:
    """A window analysed over the remaining pipelines (renumbered 0..len(kept_dp)-1), in the
    job's own DP ranks: the worker grid gets null for the lost DP ranks, findings and top
    workers name the job's ranks, and `note` says which ranks the window left out."""
    back = dict(enumerate(kept_dp))
    line["worker_slowdown"] = [[row[kept_dp.index(d)] if d in kept_dp else None
                                for d in range(dp)] for row in line["worker_slowdown"]]
    line["dp_slowdown"] = {str(back[int(k)]): v for k, v in line["dp_slowdown"].items()}
    line["top_workers"] = [dict(w, dp_rank=back[w["dp_rank"]]) for w in line["top_workers"]]
    for f in line["findings"]:
        f["ranks"] = [dict(r, dp_rank=back[r["dp_rank"]],
                           rank=r["stage"] * dp + back[r["dp_rank"]]) for r in f["ranks"]]
    line["dp_size"] = dp
    line["lost_ranks"] = lost
    line["note"] = (f"window over {len(kept_dp)} of {dp} DP ranks: ranks {lost} lost with "
                    "their node")
