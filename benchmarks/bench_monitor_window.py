"""Benchmark: the live monitor's CPU per window on a finished run folder.

The monitor analyses the last K complete steps after each new one
(`stragglerlab.monitor.window.analyse_window`: the what-if, then the detectors). This
replays a run folder through the monitor once (on a copy: the folder is only read),
keeps every full K-step window it built, and times `analyse_window` on them again,
`--repeats` times: wall and process CPU seconds per window, and the CPU split between
the what-if (`run_whatif`) and the detectors.

    python benchmarks/bench_monitor_window.py RUN [RUN ...] [--window-steps 8]
        [--repeats 3] [--profile FILE]

--profile also writes a cProfile of one pass (pstats) and prints its top entries.
Unlike `bench_monitor.py` (the lag to the page, with reading the parts), this is the
analysis alone on real traces.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
from pathlib import Path

from stragglerlab.analysis.detectors import Run
from stragglerlab.analysis.whatif import run_whatif
from stragglerlab.monitor import Monitor, MonitorConfig, runner
from stragglerlab.monitor import window as monitor_window


def windows(run: Path, k: int) -> list[tuple]:
    """(trace, meta, where, testbed, K) of every full window the monitor analyses on run."""
    seen: list[tuple] = []
    analyse = monitor_window.analyse_window

    def keep(df, meta, detectors, where, testbed, window_steps=None):
        if df["step"].nunique() == k:
            seen.append((df.copy(), meta, where, testbed, window_steps))
        return analyse(df, meta, detectors, where, testbed, window_steps)

    with tempfile.TemporaryDirectory(prefix="bench-window-") as tmp:
        copy = Path(tmp) / run.name
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("monitor"))
        runner.analyse_window = keep
        try:
            mon = Monitor(MonitorConfig(run=copy, window_steps=k))
            mon.run(once=True)
            mon.sender.close()
        finally:
            runner.analyse_window = analyse
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--window-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", type=Path, default=None)
    args = ap.parse_args()
    detectors = monitor_window.make_detectors(["whatif"])
    print(f"| run | windows | wall (s/window) | CPU (s/window) | what-if CPU | detectors CPU |"
          f"  (K = {args.window_steps}, {args.repeats} repeats, {time.strftime('%Y-%m-%d')})")
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        found = windows(run, args.window_steps)
        if not found:
            print(f"| {run} | 0 | | | | |")
            continue
        n = len(found) * args.repeats
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.repeats):
            for df, meta, where, testbed, k in found:
                monitor_window.analyse_window(df, meta, detectors, where, testbed, k)
        wall, cpu = (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n
        whatif = time.process_time()
        for _ in range(args.repeats):
            results = [run_whatif(df, meta, where).result for df, meta, where, _, _ in found]
        whatif = (time.process_time() - whatif) / n
        detect = time.process_time()
        for _ in range(args.repeats):
            for (df, meta, where, testbed, k), result in zip(found, results):
                monitor_window.detect(detectors, Run(df, meta, where, testbed=testbed),
                                      result, k)
        detect = (time.process_time() - detect) / n
        print(f"| {run} | {len(found)} | {wall:.4f} | {cpu:.4f} | {whatif:.4f} | {detect:.4f} |",
              flush=True)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for df, meta, where, testbed, k in found:
                monitor_window.analyse_window(df, meta, detectors, where, testbed, k)
            prof.disable()
            prof.dump_stats(args.profile)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
