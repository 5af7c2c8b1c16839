"""Benchmark: cost of the `whatif` stage-shift rule (whatif_shift.py) as a run grows.

`level_shift` tries every window of a stage's per-step series (one numpy pass per
start: O(T^2) over T steps), so its cost grows with the run's length, not its
width. Per length: `level_shift` alone on a lognormal series with a 1.6x rise in
its second half, and `slowed_stages` on a synthetic DP x PP 8 job
(workloads/synthetic.py, 4 microbatches) with one 1.8x device on every DP rank
of stage 5 from a quarter of the way in, with what it named.

    python benchmarks/bench_shift.py [--steps 64 256 1024] [--dp 1 4]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from stragglerlab.analysis.detectors.base import Run
from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_shift import level_shift, slowed_stages
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--dp", type=int, nargs="+", default=[1, 4])
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| steps | dp x pp | ops | level_shift s | slowed_stages s | named |")
    print("|---|---|---|---|---|---|")
    for n in args.steps:
        series = rng.lognormal(0.0, 0.05, n) * np.where(np.arange(n) >= n // 2, 1.6, 1.0)
        t0 = time.perf_counter()
        level_shift(series, 3)
        one = time.perf_counter() - t0
        for dp in args.dp:
            slow = tuple(SlowWorker(dp_rank=d, stage=5, factor=1.8, first_step=n // 4)
                         for d in range(dp))
            df, meta = synthesize_trace(SyntheticConfig(
                dp_size=dp, pp_size=8, n_microbatches=4, n_steps=n, slow_workers=slow))
            steps = np.sort(df["step"].unique())
            scores = np.ones((meta.pp_size, meta.dp_size, len(steps)))
            t0 = time.perf_counter()
            found = slowed_stages(Run(df, meta, "bench"), steps, WhatIfDetectorConfig(), [],
                                  scores)
            took = time.perf_counter() - t0
            named = ", ".join(f"dp{r.dp_rank}-pp{r.stage} {f.first_step}-{f.last_step}"
                              for f in found for r in f.ranks)
            print(f"| {n} | {dp} x 8 | {len(df):,} | {one:.4f} | {took:.3f} | "
                  f"{named or 'nothing'} |")


if __name__ == "__main__":
    main()
