"""Benchmark: what one more job, and one more worker, cost a monitor of several jobs.

For each layout, `--jobs` copies of a `synth` trace (a slow worker from the
middle step) are replayed into as many run folders step by step and watched by
one `Fleet` (stragglerlab.monitor.fleet, what `monitor --runs` runs), looking
once after each step. Reported per layout, per job:

- /metrics: the series (`JobRegistry.metrics_text`, every job labelled
  job_name), its bytes, and the time to render it;
- memory the monitor holds for the job after the replay (tracemalloc: its tail,
  its step buffer of K steps, its history of `--steps` windows, its alert
  thread's objects), and what one more window line of history adds (a job keeps
  at most MonitorState's MAX_KEPT_LINES = 5,000 in memory and MAX_KEPT_BYTES = 64 MiB
  of them, so the lesser of that line times 5,000 and 64 MiB is its history's ceiling);
- the analysis time of one look at every job, per job, with full windows (a
  separate replay, without tracemalloc): windows are analysed one job after
  another, so a step that completes in every job at once costs jobs x this.

Then a least-squares line over the layouts: series, bytes and memory per job as
fixed + per-worker.

    python benchmarks/bench_monitor_jobs.py [--layouts 2x2 8x4 32x8] [--jobs 4]
        [--steps 16] [--window-steps 8]

Prints Markdown tables (docs/monitor.md, "Cost per job and per worker").
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from stragglerlab.monitor.config import MonitorConfig
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.monitor.fleet import Fleet
from stragglerlab.monitor.jobs import FleetLimits
from stragglerlab.monitor.state import MAX_KEPT_BYTES, MAX_KEPT_LINES, MonitorState
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def one(dp: int, pp: int, jobs: int, steps: int, k: int) -> dict:
    """One layout's figures, per job."""
    df, _ = synthesize_trace(SyntheticConfig(
        dp_size=dp, pp_size=pp, n_microbatches=4, n_steps=steps,
        slow_workers=(SlowWorker(dp - 1, pp - 1, 1.5, steps // 2),)))
    with tempfile.TemporaryDirectory(prefix="bench-monitor-jobs-") as tmp:
        feeders = [PartsFeeder(Path(tmp) / f"job{i}" / "0", df) for i in range(jobs)]
        cfg = MonitorConfig(run=Path("."), window_steps=k)
        look_s = replay(cfg, feeders, Path(tmp) / "timed", traced=False)[1]
        fleet, held = replay(cfg, feeders, Path(tmp) / "traced", traced=True)
        reg = fleet.registry
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            text = reg.metrics_text()
            times.append(time.perf_counter() - t0)
        line = reg.all()[0].state.latest_window()
        fleet.close()
    series = sum(1 for x in text.splitlines() if x and not x.startswith("#")) - 2  # less
    # the two fleet-wide series (stragglerlab_jobs, stragglerlab_jobs_refused_total)
    return {"workers": dp * pp, "layout": f"{dp} x {pp}", "series": series / jobs,
            "bytes": len(text.encode()) / jobs, "render_ms": statistics.median(times) / jobs
            * 1e3, "held": held / jobs, "line": line_bytes(line),
            "look_s": statistics.median(look_s[k:]) / jobs}


def replay(cfg: MonitorConfig, feeders: list[PartsFeeder], root: Path,
           traced: bool) -> tuple[Fleet, list[float] | float]:
    """Replay every feeder's trace into fresh folders under `root`, one look per step:
    (the fleet, the memory it holds after the replay) when traced, else (the fleet, the
    seconds of each look)."""
    fresh = [PartsFeeder(root / f.run_dir.parent.name / "0", f.df, origin=0.0)
             for f in feeders]
    for f in fresh:
        f.run_dir.mkdir(parents=True)
    if traced:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    fleet = Fleet(cfg, runs=[f.run_dir for f in fresh], limits=FleetLimits())
    look_s = []
    for step in fresh[0].steps:
        for f in fresh:
            f.write_step(step)
        fleet.discover()
        t0 = time.perf_counter()
        fleet.poll()
        look_s.append(time.perf_counter() - t0)
    if not traced:
        fleet.close()
        return fleet, look_s
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return fleet, held


def line_bytes(line: dict, n: int = 200) -> float:
    """Memory one more history line of this shape holds (n independent copies)."""
    text = json.dumps(line)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    state = MonitorState("x")
    for _ in range(n):
        state.add(json.loads(text))  # as a resumed history is read back: nothing shared
    size = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return size / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", nargs="+", default=["2x2", "8x4", "32x8"])
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--window-steps", type=int, default=8)
    args = ap.parse_args()
    rows = []
    for layout in args.layouts:
        dp, pp = (int(x) for x in layout.split("x"))
        rows.append(one(dp, pp, args.jobs, args.steps, args.window_steps))
    print(f"Per job (one monitor of {args.jobs} jobs per layout, K = {args.window_steps}, "
          f"{args.steps} steps, {time.strftime('%Y-%m-%d')}):\n")
    print("| workers (DP x PP) | /metrics series | /metrics bytes | render (ms) | memory "
          "held (KiB) | per history line (KiB) | history ceiling (MiB) | one look (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} ({r['layout']}) | {r['series']:.0f} | {r['bytes']:.0f} | "
              f"{r['render_ms']:.2f} | {r['held'] / 1024:.0f} | {r['line'] / 1024:.1f} | "
              f"{min(r['line'] * MAX_KEPT_LINES, MAX_KEPT_BYTES) / 2**20:.0f} | "
              f"{r['look_s']:.3f} |")
    if len(rows) >= 2:
        w = np.array([r["workers"] for r in rows], dtype=float)
        print("\nFitted over the layouts, fixed per job + per worker:\n")
        print("| quantity | per job | per worker |")
        print("|---|---|---|")
        for key, name, scale, unit in (("series", "/metrics series", 1, ""),
                                       ("bytes", "/metrics bytes", 1, " B"),
                                       ("held", "memory held", 1024, " KiB"),
                                       ("line", "one history line", 1024, " KiB")):
            slope, icept = np.polyfit(w, [r[key] for r in rows], 1)
            print(f"| {name} | {icept / scale:.1f}{unit} | {slope / scale:.3f}{unit} |")


if __name__ == "__main__":
    main()
