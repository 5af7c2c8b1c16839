"""Benchmark: the live monitor's analysis lag per window vs job size.

For each layout, a `synth` trace (with a slow worker from the middle step) is
replayed into a fresh run folder's trace parts one step at a time
(stragglerlab.monitor.feed.PartsFeeder), and the monitor looks once after each
step, as it would after each step of a real run. Reported per layout: the
median and max wall-clock lag per window (`lag_s`: the look that found the step
complete -> the window published in windows.jsonl, i.e. reading, the what-if on
the K-step window, the detectors and the append), over the windows after the
first K (full windows), with `--repeats` replays. The page and /metrics read
the published state, so this is the lag to what they show, less one poll
interval (0.5 s by default) and the server's event poll (0.25 s).

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


def one(dp: int, pp: int, steps: int, k: int, microbatches: int) -> list[float]:
    """Full-window lags (s) of one replay."""
    df, _ = synthesize_trace(SyntheticConfig(
        dp_size=dp, pp_size=pp, n_microbatches=microbatches, n_steps=steps,
        slow_workers=(SlowWorker(dp - 1, pp - 1, 1.5, steps // 2),)))
    with tempfile.TemporaryDirectory(prefix="bench-monitor-") as tmp:
        run = Path(tmp)
        feeder = PartsFeeder(run, df)
        mon = Monitor(MonitorConfig(run=run, window_steps=k, dp=dp, pp=pp))
        lags = []
        for step in feeder.steps:
            feeder.write_step(step)
            for w in mon.poll():
                if len(w["steps"]) == k:
                    lags.append(w["lag_s"])
        mon.sender.close()
    return lags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", nargs="+", default=["2x2", "4x4", "128x8"])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--window-steps", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"| workers (DP x PP) | windows | lag median (s) | lag max (s) |  "
          f"(K = {args.window_steps}, {args.microbatches} microbatches, "
          f"{time.strftime('%Y-%m-%d')})")
    print("|---|---|---|---|")
    for layout in args.layouts:
        dp, pp = (int(x) for x in layout.split("x"))
        lags = []
        for _ in range(args.repeats):
            lags += one(dp, pp, args.steps, args.window_steps, args.microbatches)
        print(f"| {dp * pp} ({dp} x {pp}) | {len(lags)} | {statistics.median(lags):.3f} | "
              f"{max(lags):.3f} |", flush=True)


if __name__ == "__main__":
    main()
