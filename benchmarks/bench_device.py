"""Benchmark: cost of the `whatif` slow-device rule (whatif_device.py) as a job grows.

Synthetic DP x PP 4 jobs (workloads/synthetic.py: 4 microbatches, `--steps` steps,
one 1.5x slow device at DP rank 1 of stage 2), at growing DP sizes; per size the
trace's ops, the wall time of `slow_devices` (a groupby over the compute ops, one
sort per stage and step for the median of each rank's peers, the windowed hold),
and what it named (the slow device alone). With `--seq` the lengths vary, so each
(stage, op type) also gets its least-squares cost line.

    python benchmarks/bench_device.py [--dp 8 256 1024] [--steps 16] [--seq]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from stragglerlab.analysis.detectors.base import Run
from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_device import slow_devices
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="+", default=[8, 256, 1024])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--seq", action="store_true", help="varying sequence lengths")
    args = ap.parse_args()
    print("| dp x pp | lengths | ops | slow_devices s | s per 1M ops | named |")
    print("|---|---|---|---|---|---|")
    for dp in args.dp:
        df, meta = synthesize_trace(SyntheticConfig(
            dp_size=dp, pp_size=4, n_microbatches=4, n_steps=args.steps,
            seq_imbalance_sigma=0.5 if args.seq else 0.0,
            slow_workers=(SlowWorker(dp_rank=1, stage=2, factor=1.5),)))
        run = Run(df, meta, f"synthetic-dp{dp}")
        steps = np.sort(df["step"].unique())
        scores = np.ones((meta.pp_size, meta.dp_size, len(steps)))
        t0 = time.perf_counter()
        found = slow_devices(run, steps, WhatIfDetectorConfig(), [], scores)
        took = time.perf_counter() - t0
        named = ", ".join(f"dp{r.dp_rank}-pp{r.stage}" for f in found for r in f.ranks)
        print(f"| {dp} x 4 | {'varying' if args.seq else 'fixed'} | {len(df):,} | "
              f"{took:.3f} | {took / len(df) * 1e6:.3f} | {named or 'nothing'} |")


if __name__ == "__main__":
    main()
