"""`stragglerlab monitor`: watch a running (or finished) run live: rolling what-if, page, alerts.

    stragglerlab monitor --run results/slow-worker-1/0
    stragglerlab monitor --run results/x/0 --webhook http://127.0.0.1:9000/hook --slowdown-alert 1.2
    stragglerlab monitor --run examples/slow-worker --once --no-serve
    stragglerlab monitor --run out/imported --once     # an `import kineto` folder, replayed
    stragglerlab monitor --runs results/a/0 results/b/0 --watch results --webhook http://127.0.0.1:9000/hook
    stragglerlab monitor --ray-address 10.0.0.1:6379 --run /data/results/x/0

Tails the run folder's trace parts (`trace-parts/rank<r>.bin`) as the ranks
append them and, after every new complete step, analyses the last K complete
steps (--window-steps) with the what-if analysis and the --detectors'
findings. Each window (S, the DP x stage worker scores, S per stage and op
type, findings, analysis lag) is appended to RUN/monitor/windows.jsonl (schema
stragglerlab.monitor-window/1); a restarted monitor resumes after the last
window there. The run folder is only read, except RUN/monitor/. Unless
--no-serve, a page with the S history, the worker heatmap, the findings and
the run's ground truth is served at http://HOST:PORT/ (loopback unless
--allow-remote), with /metrics (Prometheus) and /api/windows. Alerts (a
finding appears or clears, S crosses --slowdown-alert) go to --webhook
and/or --alert-command; delivered ones are kept in RUN/monitor/alerts.jsonl,
failed ones in RUN/monitor/alerts-failed.jsonl. It stops when the run ends
(run.json written), on Ctrl-C or SIGTERM, or, with --once, after analysing
what is there; it prints a summary of the windows it analysed to stdout (with
--quiet too), progress on stderr. An unannotated import (`stragglerlab import
kineto`: ops.parquet) is replayed window by window in one look: each window's
general what-if, and the detectors that need only step times (one that needs
the op vocabulary is named once and left out).

With --runs DIR... and/or --watch DIR (new run folders below it are picked up
as they appear), one monitor watches several jobs: each keeps its own history
and alerts (which name its job), the root page lists the jobs by current S and
findings and links each job's page (/jobs/NAME/), and /metrics serves every
job's series labelled job_name, bounded by --max-jobs and --max-worker-series.

With --ray-address ADDR, it attaches to a run going on on that Ray cluster
(`train --ray-address`), found by its driver's run folder (--ray-run, default
--run's absolute path): every node's helper streams its ranks' trace parts into
--run on this host (made if missing), with the run's nodes.json (clock
corrections, lost nodes). It stops when the run's helpers are gone.
See docs/monitor.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from stragglerlab.cli import ArgumentParser
from stragglerlab.util.errors import InputError


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet; the epilog comes from the
    module docstring's examples)."""
    p = sub.add_parser(name, help="watch a run live: rolling what-if, findings, page, "
                                  "Prometheus metrics, alerts")
    p.add_argument("--run", metavar="DIR",
                   help="run folder to watch (trace-parts/ written by `stragglerlab train`), "
                        "or an unannotated import's (`import kineto`: its steps replayed "
                        "as windows)")
    p.add_argument("--runs", nargs="+", metavar="DIR",
                   help="watch several run folders in one monitor: an overview page of the "
                        "jobs, each job's page at /jobs/NAME/, /metrics labelled job_name")
    p.add_argument("--watch", metavar="DIR",
                   help="also watch every run folder that appears below DIR (up to 3 "
                        "levels, e.g. results/SCENARIO/TRIAL), until stopped")
    p.add_argument("--max-jobs", type=int, default=32, metavar="N",
                   help="--runs/--watch: jobs watched at once; a new run beyond it takes "
                        "the place of an ended job, or waits for one to end")
    p.add_argument("--max-worker-series", type=int, default=1024, metavar="N",
                   help="--runs/--watch: worker series per job in /metrics (a larger job "
                        "exports its N highest-scored workers)")
    p.add_argument("--window-steps", type=int, default=8, metavar="K",
                   help="analyse the last K complete steps after each new one")
    p.add_argument("--detectors", nargs="+", default=["whatif"], metavar="NAME",
                   help="detectors whose findings each window reports "
                        "(`stragglerlab list detectors`)")
    p.add_argument("--noise-floor", default="default", metavar="FILE",
                   help="whatif: the measured noise floor its thresholds are raised to "
                        "(`stragglerlab noise-floor` writes one from clean runs of your "
                        "job); `default`: the shipped one, for this testbed's runs; `none`")
    p.add_argument("--webhook", metavar="URL",
                   help="POST each alert's JSON payload here (no webhook when left out)")
    p.add_argument("--alert-command", metavar="CMD",
                   help="run this shell command per alert, the payload on stdin")
    p.add_argument("--slowdown-alert", type=float, metavar="X",
                   help="alert when a window's S rises to X or falls back below it "
                        "(no S alert when left out)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address the page binds; a non-loopback one needs --allow-remote")
    p.add_argument("--port", type=int, default=8765, help="port the page binds (0: any free)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the page has no authentication)")
    p.add_argument("--no-serve", action="store_true", help="no web server: history and alerts only")
    p.add_argument("--once", action="store_true",
                   help="analyse what is there now and exit (no web server)")
    p.add_argument("--warmup-steps", type=int, metavar="N",
                   help="steps left out at the start (default: run.json's scenario, else 0)")
    p.add_argument("--dp", type=int, metavar="N",
                   help="DP size while meta.yaml is not written (default: inferred)")
    p.add_argument("--pp", type=int, metavar="N",
                   help="PP size while meta.yaml is not written (default: inferred)")
    p.add_argument("--poll", type=float, default=0.5, metavar="S",
                   help="longest wait in seconds between two looks at the trace parts; "
                        "a look also comes once a step's status files land (above 0; a "
                        "shorter wait than 0.05 is lengthened to it)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="attach to a run going on on this Ray cluster and stream its nodes' "
                        "trace parts into --run here")
    p.add_argument("--ray-run", metavar="PATH",
                   help="with --ray-address: the run folder's path on the driver's host "
                        "(default: --run's absolute path)")
    return p


def run(args) -> int:
    """Watch the run until it ends (or once), serving the page unless told not to."""
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.run.run_folder import RunFolder

    if args.runs or args.watch:
        return run_many(args)
    if args.run is None:
        raise InputError("name what to watch: --run DIR (one run), or --runs DIR... and/or "
                         "--watch DIR (several jobs)")
    if args.ray_run and not args.ray_address:
        raise InputError("--ray-run names a run on a Ray cluster: give --ray-address too")
    if args.ray_address:
        if args.once:
            raise InputError("--ray-address streams a live run: drop --once (a finished "
                             "run's folder is read with --run alone)")
        return run_attached(args)
    folder = RunFolder.open(args.run)
    cfg = config(args, folder.path)
    if args.once:
        _a_run_to_read(folder.path)
    serve = not (args.no_serve or args.once)
    with Reporter(quiet=args.quiet) as progress:
        from stragglerlab.monitor.import_replay import monitor_for

        monitor = monitor_for(cfg, log=progress.log)
        server = _server(monitor, cfg, progress) if serve else None
        try:
            n = monitor.run(once=args.once)
        finally:
            if server is not None:
                server.stop()
    if args.once and monitor.state.errors:
        # One pass over a finished run: what it could not read is the answer, not noise.
        raise InputError(f"{monitor.state.errors} error(s) while reading the run (garbage "
                         "trace parts, failed analyses); each is a line of kind 'error' in "
                         f"{monitor.windows_path}", str(args.run))
    if (args.once or monitor.ended) and n == 0 and monitor.state.windows_analysed == 0:
        reason, flag_to_blame = monitor.idle_reason()
        if flag_to_blame:  # the run ended: a later look would find nothing either
            raise InputError(f"no window analysed: {reason}", str(args.run))
        if not args.quiet:
            print(f"warning: no window analysed: {args.run}: {reason}", file=sys.stderr)
    print(summary(monitor, n))  # the result: stdout, --quiet or not (a refusal has none)
    return 0


def run_attached(args) -> int:
    """`--ray-address`: stream a cluster run's nodes into --run here, and watch it."""
    import threading

    from stragglerlab.cli.progress import Reporter
    from stragglerlab.workloads.placement import check_ray_address, check_ray_reachable

    check_ray_address(args.ray_address)
    if args.ray_address != "auto":
        check_ray_reachable(args.ray_address)
    run_dir = Path(args.run).resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError("--run: not a folder (with --ray-address, the folder on this host "
                         "the run's files are streamed into)", str(args.run))
    cfg = config(args, run_dir)
    driver_run = args.ray_run or str(run_dir)
    if (run_dir / ".driver-token").exists():
        raise InputError("--run is the driver's own run folder (its ranks' files already "
                         "arrive here): drop --ray-address", str(args.run))
    run_dir.mkdir(parents=True, exist_ok=True)
    with Reporter(quiet=args.quiet) as progress:
        from stragglerlab.workloads.cluster import attach_stream

        try:
            streams = attach_stream(args.ray_address, run_dir, driver_run, progress.log)
        except (ConnectionError, LookupError) as e:
            raise InputError(str(e)) from None
        stop = threading.Event()
        from stragglerlab.monitor.runner import Monitor

        try:
            monitor = Monitor(cfg, log=progress.log)
            server = None if args.no_serve else _server(monitor, cfg, progress)

            def watch_end() -> None:
                streams.ended.wait()
                progress.log("the run's helpers are gone (the run ended); stopping")
                stop.set()

            threading.Thread(target=watch_end, daemon=True).start()
            try:
                n = monitor.run(stop)
            finally:
                if server is not None:
                    server.stop()
        finally:
            import ray

            streams.stop()
            ray.shutdown()
    print(summary(monitor, n))
    return 0


def run_many(args) -> int:
    """Watch several runs (--runs, --watch) with one monitor: one overview page, /metrics
    of every job labelled job_name, alerts naming the job."""
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.monitor.fleet import Fleet
    from stragglerlab.monitor.jobs import FleetLimits
    from stragglerlab.run.run_folder import RunFolder

    if args.run is not None:
        raise InputError("--run watches one run; with --runs/--watch, name it among --runs")
    for flag, value in (("--dp", args.dp), ("--pp", args.pp)):
        if value is not None:
            raise InputError(f"{flag}: one layout for every job cannot be right; with "
                             "--runs/--watch each job's comes from its meta.yaml, else is "
                             "inferred from its trace parts")
    runs, seen = [], set()
    for r in args.runs or []:
        path = RunFolder.open(r).path
        if path.resolve() not in seen:
            seen.add(path.resolve())
            runs.append(path)
    watch = None
    if args.watch is not None:
        watch = Path(args.watch)
        if not watch.is_dir():
            raise InputError("--watch: not a folder (give the folder new run folders appear "
                             "in, e.g. results)", str(watch))
    limits = FleetLimits(max_jobs=args.max_jobs, max_worker_series=args.max_worker_series)
    limits.check()
    cfg = config(args, Path("."))  # every job's settings; each job gets its own run
    serve = not (args.no_serve or args.once)
    with Reporter(quiet=args.quiet) as progress:
        fleet = Fleet(cfg, runs=runs, watch=watch, limits=limits, log=progress.log)
        server = _server(None, cfg, progress, fleet.registry) if serve else None
        try:
            n = fleet.run(once=args.once)
        finally:
            if server is not None:
                server.stop()
    if fleet.failed and not fleet.all_monitors():
        raise InputError("no run could be watched: " + "; ".join(
            f"{r}: {why}" for r, why in fleet.failed.items()))
    print(summary_many(fleet, n))
    return 0


def summary_many(fleet, n: int) -> str:
    """The result lines of a monitor of several jobs: one per job, highest S first."""
    rows = fleet.registry.overview()
    out = [f"monitor of {len(rows)} job(s): {n} window(s) analysed now"
           + (f", {len(fleet.failed)} run(s) not watched" if fleet.failed else "")
           + (f", {len(fleet.waiting)} waiting for room (--max-jobs)" if fleet.waiting else "")]
    for r in rows:
        s = "-" if r["slowdown"] is None else f"{r['slowdown']:.3f}"
        causes = ", ".join(sorted({f["cause"] for f in r["findings"]})) or "no finding"
        out.append(f"  {r['name']:24s} S {s:6s} {causes}; {r['windows_analysed']} window(s), "
                   f"{r['errors']} error(s), {r['status']} ({r['run']})")
    for run, why in fleet.failed.items():
        out.append(f"  not watched: {run}: {why}")
    return "\n".join(out)


def _a_run_to_read(run: Path) -> None:
    """--once reads what is there now: a folder with no trace of ours is refused before
    monitor/ is made in it (a live monitor may wait for a run still starting)."""
    from stragglerlab.run.general_record import is_general_import
    from stragglerlab.run.run_folder import TRACE_PARQUET, TRACE_PARTS_DIR

    if any(os.path.lexists(run / n) for n in (TRACE_PARTS_DIR, TRACE_PARQUET)):
        return  # there, if not as it should be: the monitor's own readers name what is wrong
    if is_general_import(run):
        return  # an unannotated import: its steps are replayed (monitor/import_replay.py)
    what = ("holds import.json but no ops.parquet (an import cut short: import the traces "
            "again with `stragglerlab import kineto --traces ... --out DIR`)"
            if (run / "import.json").exists() else
            "holds no trace of a `stragglerlab train` run (trace-parts/ or trace.parquet) "
            "and no import (ops.parquet)")
    raise InputError(f"{what}; point --run at a training run's folder or an import's",
                     str(run))


def config(args, run: Path):
    """The MonitorConfig of the verb's flags, checked (InputError on a bad value)."""
    from stragglerlab.monitor.config import MonitorConfig

    cfg = MonitorConfig(run=run, window_steps=args.window_steps,
                        detectors=list(args.detectors), noise_floor=args.noise_floor,
                        warmup_steps=args.warmup_steps,
                        dp=args.dp, pp=args.pp, poll_s=args.poll,
                        webhook=args.webhook, alert_command=args.alert_command,
                        slowdown_alert=args.slowdown_alert, host=args.host, port=args.port,
                        allow_remote=args.allow_remote)
    cfg.check()
    return cfg


def check_server_extra() -> None:
    """InputError when the page's extra (starlette, uvicorn) is not installed."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("starlette", "uvicorn")):
        raise InputError("the page needs starlette and uvicorn: pip install "
                         "'stragglerlab[monitor]', or pass --no-serve")


def _server(monitor, cfg, progress, registry=None):
    """Start the web server of `monitor`'s run, or of every job in `registry` (InputError
    when its extra is missing or the port is taken)."""
    from stragglerlab.monitor.config import check_host

    check_server_extra()
    from stragglerlab.monitor.server import MonitorServer

    if check_host(cfg.host, cfg.allow_remote):
        progress.error(f"warning: serving on {cfg.host}, not loopback: anyone who reaches it "
                       "sees the run's page, history and metrics (no authentication)")
    if registry is not None:
        server = MonitorServer(None, None, cfg.host, cfg.port, registry=registry)
        server.start()
        progress.error(f"monitor page: {server.url}  (the jobs; metrics: {server.url}metrics)")
        return server
    server = MonitorServer(monitor.state, cfg.run, cfg.host, cfg.port)
    server.start()
    progress.error(f"monitor page: {server.url}  (metrics: {server.url}metrics)")
    return server


def summary(monitor, n: int) -> str:
    """The result lines: windows analysed, last S and findings, where the history is."""
    state = monitor.state
    last = state.latest_window()
    out = [f"monitor on {monitor.cfg.run}: {n} window(s) analysed now, "
           f"{state.windows_analysed} in the history, {state.errors} error(s) -> "
           f"{Path(monitor.windows_path)}"]
    if last is not None:
        out.append(f"  latest window: steps {last['steps'][0]}-{last['step']}, "
                   f"S {last['slowdown']:.3f}")
        for f in last["findings"]:
            ranks = ", ".join(f"(DP {r['dp_rank']}, PP {r['stage']})" for r in f["ranks"])
            est = f", est. slowdown {f['estimated_slowdown']:.2f}" \
                if f.get("estimated_slowdown") else ""
            out.append(f"  {f['cause']:18s} {ranks or 'whole job'}  steps "
                       f"{f['first_step']}-{f['last_step']}{est}")
    return "\n".join(out)


MONITOR_NICE = 5
"""`train --monitor`: the monitor runs at this nice increment, so the job keeps the CPU."""
MONITOR_EXIT_WAIT_S = 120.0
"""`train --monitor`: how long the monitor may take to analyse the last steps after the run."""


def monitor_argv(run: Path, scenario, monitor_args: str | None) -> list[str]:
    """`monitor --run RUN` with the job's layout and warm-up, then `--monitor-args`; a
    layout flag given there replaces the job's (each flag is given once)."""
    import shlex

    try:
        extra = shlex.split(monitor_args or "")
    except ValueError as e:
        raise InputError(f"--monitor-args {monitor_args!r}: {e}") from None
    named = {a.split("=", 1)[0] for a in extra if a.startswith("--")}
    if named & {"--run", "--runs", "--watch"}:
        raise InputError("--monitor-args: the monitor beside the job watches its --out; "
                         "leave --run out (and --runs, --watch: one monitor of several jobs "
                         "runs on its own)")
    layout = [(flag, str(value)) for flag, value in (
        ("--dp", scenario.parallel.dp), ("--pp", scenario.parallel.pp),
        ("--warmup-steps", scenario.run.warmup_steps)) if flag not in named]
    return ["monitor", "--run", str(run), *(x for pair in layout for x in pair), *extra]


class _ArgvParser(ArgumentParser):
    """The monitor verb's parser for `train --monitor-args`: a refusal is an InputError
    naming --monitor-args (train's own error line), not the monitor's exit."""

    def error(self, message: str):
        raise InputError(f"--monitor-args: {message} (see `stragglerlab monitor --help`)")

    def exit(self, status: int = 0, message: str | None = None):
        raise InputError(f"--monitor-args: {message or 'not flags the monitor takes'} "
                         "(see `stragglerlab monitor --help`)")


def check_monitor_argv(argv: list[str]) -> None:
    """InputError when the monitor started with `argv` (monitor_argv's) would refuse its
    flags, checked as the `monitor` verb checks them: with its own parser, its settings'
    checks and its detectors' names, so a bad --monitor-args stops `train --monitor`
    before the job starts instead of leaving it unmonitored."""
    from stragglerlab.monitor.window import make_detectors

    flags = argv[1:]
    if {"-h", "--help"} & set(flags):
        raise InputError("--monitor-args: --help is not a flag for the monitor beside the "
                         "job; see `stragglerlab monitor --help`")
    if "--once" in flags:  # it would look once at a run not started yet, and stop
        raise InputError("--monitor-args: --once stops the monitor after one look, before "
                         "the job has a step; leave it out (the monitor stops when the run "
                         "ends)")
    sub = _ArgvParser(prog="stragglerlab").add_subparsers(parser_class=_ArgvParser)
    p = add_parser(sub, argv[0])
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(flags)
    try:
        cfg = config(args, Path(args.run))
        make_detectors(cfg.detectors)
        if not args.no_serve:
            check_server_extra()
    except InputError as e:
        raise InputError(f"--monitor-args: {e}") from None


def _report_exit(proc, stopping, progress, run: Path) -> None:
    """Wait for the monitor beside the job; a non-zero exit not caused by train's own stop
    is said on stderr at once (its error line is above): the run goes on unmonitored."""
    rc = proc.wait()
    # 130/143 and signals: Ctrl-C or a kill reached it with train (train says so itself).
    if rc > 0 and rc not in (130, 143) and not stopping.is_set():
        progress.error(f"warning: the monitor beside the job exited with status {rc} (its "
                       "error is above): the job goes on unmonitored; watch it with "
                       f"`stragglerlab monitor --run {run}`")


@contextlib.contextmanager
def beside(args, scenario, progress):
    """`train --monitor`: a `stragglerlab monitor` process on the run folder for the run's
    length (the job's layout and warm-up passed on, `--monitor-args` added). The folder's
    outputs of an earlier run are removed first (the launcher would remove them anyway),
    so the monitor never reads them. Its stdout goes to stderr: train's stdout is the
    outcome."""
    if not getattr(args, "monitor", False):
        yield None
        return
    import shlex
    import subprocess
    import sys
    import threading

    from stragglerlab.workloads.launcher import prepare_run_dir

    run = Path(args.out)
    # Its flags were checked by train (check_monitor_argv) before anything started.
    cmd = [sys.executable, "-m", "stragglerlab", *monitor_argv(run, scenario, args.monitor_args)]
    prepare_run_dir(run)
    # Not a rank process: without the driver's mark, no run's residue cleanup reaps it.
    env = {k: v for k, v in os.environ.items() if k != "STRAGGLERLAB_DRIVER"}
    proc = subprocess.Popen(cmd, stdout=sys.stderr, stdin=subprocess.DEVNULL, env=env,
                            preexec_fn=lambda: os.nice(MONITOR_NICE))  # noqa: PLW1509
    progress(f"monitor started beside the job (pid {proc.pid}): {shlex.join(cmd[2:])}")
    stopping = threading.Event()  # set before train stops it: that exit is no failure
    watcher = threading.Thread(target=_report_exit, args=(proc, stopping, progress, run),
                               daemon=True, name="monitor-exit")
    watcher.start()
    try:
        yield proc
        try:  # it stops by itself once run.json is written and the last steps analysed
            proc.wait(MONITOR_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            progress(f"the monitor did not stop {MONITOR_EXIT_WAIT_S:.0f}s after the run; "
                     "stopping it")
    finally:
        if proc.poll() is None:
            stopping.set()
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        watcher.join(10)  # its warning, if any, is printed before train's outcome
