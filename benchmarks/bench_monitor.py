"""Benchmark: the live monitor's analysis lag per window vs job size.

For each layout, a `synth` trace (with a slow worker from the middle step) is
replayed into a fresh run folder's trace parts one step at a time
(stragglerlab.monitor.feed.PartsFeeder), and the monitor looks once after each
step, as it would after each step of a real run. Reported per layout: the
median and max wall-clock lag per window (`lag_s`: the look that found the step
complete -> the window published in windows.jsonl, i.e. reading, the what-if on
the K-step window, the detectors and the append), over the windows after the
first K (full windows), with `--repeats` replays, and the median process CPU of
a look that published a full window (what a busy host must find for the monitor
once per step; `lag_s` is wall time and grows with the host's load). The page and
/metrics read the published state, so this is the lag to what they show, less one
poll interval (0.5 s by default) and the server's event poll (0.25 s). The
script runs on whichever checkout PYTHONPATH names, so one copy of it compares
two commits (alternate them: the host's load moves).

    python benchmarks/bench_monitor.py [--layouts 2x2 4x4 128x8] [--steps 16]
        [--window-steps 8] [--microbatches 4] [--repeats 3]

Prints a Markdown table. (Step-time overhead on a real job is measured by
tests/e2e/test_monitor_train.py's runs, not here.)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from stragglerlab.monitor import Monitor, MonitorConfig
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def one(dp: int, pp: int, steps: int, k: int,
        microbatches: int) -> tuple[list[float], list[float]]:
    """Full-window lags (s) of one replay, and the process CPU (s) of each look that
    published one."""
    df, _ = synthesize_trace(SyntheticConfig(
        dp_size=dp, pp_size=pp, n_microbatches=microbatches, n_steps=steps,
        slow_workers=(SlowWorker(dp - 1, pp - 1, 1.5, steps // 2),)))
    with tempfile.TemporaryDirectory(prefix="bench-monitor-") as tmp:
        run = Path(tmp)
        feeder = PartsFeeder(run, df)
        mon = Monitor(MonitorConfig(run=run, window_steps=k, dp=dp, pp=pp))
        lags, cpu = [], []
        for step in feeder.steps:
            feeder.write_step(step)
            c0 = time.process_time()
            full = [w["lag_s"] for w in mon.poll() if len(w["steps"]) == k]
            if full:
                lags += full
                cpu.append((time.process_time() - c0) / len(full))
        mon.sender.close()
    return lags, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", nargs="+", default=["2x2", "4x4", "128x8"])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--window-steps", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"| workers (DP x PP) | windows | lag median (s) | lag max (s) | "
          f"CPU per look median (s) | load |  (K = {args.window_steps}, "
          f"{args.microbatches} microbatches, {time.strftime('%Y-%m-%d')})")
    print("|---|---|---|---|---|---|")
    for layout in args.layouts:
        dp, pp = (int(x) for x in layout.split("x"))
        lags, cpu = [], []
        for _ in range(args.repeats):
            got = one(dp, pp, args.steps, args.window_steps, args.microbatches)
            lags, cpu = lags + got[0], cpu + got[1]
        load = Path("/proc/loadavg").read_text().split()[0]
        print(f"| {dp * pp} ({dp} x {pp}) | {len(lags)} | {statistics.median(lags):.3f} | "
              f"{max(lags):.3f} | {statistics.median(cpu):.3f} | {load} |", flush=True)


if __name__ == "__main__":
    main()
