"""Benchmark: cost of the `whatif` ring-link rule (whatif_ring.py) as a pure-DP job grows.

Synthetic pure-DP jobs (workloads/synthetic.py: pp 1, 4 microbatches, `--steps`
steps, no fault) at growing DP sizes; per size the trace's ops, the wall time of
`ring_links` (its one groupby pass per collective and the windowed score), and
what it named (nothing, on a clean job).

    python benchmarks/bench_ring.py [--dp 8 256 1024 4096] [--steps 24]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from stragglerlab.analysis.detectors.base import Run
from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_ring import ring_links
from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="+", default=[8, 256, 1024, 4096])
    ap.add_argument("--steps", type=int, default=24)
    args = ap.parse_args()
    print("| dp | ops | ring_links s | s per 1M ops | named |")
    print("|---|---|---|---|---|")
    for dp in args.dp:
        df, meta = synthesize_trace(SyntheticConfig(dp_size=dp, pp_size=1, n_microbatches=4,
                                                    n_steps=args.steps))
        run = Run(df, meta, f"synthetic-dp{dp}")
        steps = np.sort(df["step"].unique())
        t0 = time.perf_counter()
        found = ring_links(run, steps, WhatIfDetectorConfig(), 1.0)
        took = time.perf_counter() - t0
        named = ", ".join(f"dp{r.dp_rank}" for f in found for r in f.ranks) or "nothing"
        print(f"| {dp} | {len(df):,} | {took:.3f} | {took / len(df) * 1e6:.3f} | {named} |")


if __name__ == "__main__":
    main()
