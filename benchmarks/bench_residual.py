"""Benchmark: the cost of the `whatif` detector's residual pass as the job grows.

Synthetic DP x PP 4 jobs (workloads/synthetic.py, one 1.8x slow worker, `--steps`
steps) at growing DP sizes, analysed once by `stragglerlab whatif`; then an offline
`detect` with the residual pass (whatif_residual.py: the finding removed, the job
simulated without it and diagnosed again) and with the pass switched off, best and worst
of `--repeats`. The ratio is the result: it survives a loaded machine better than the
times.

    .venv/bin/python benchmarks/bench_residual.py [--dp 16 64 256] [--steps 8] [--repeats 3]

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import stragglerlab.analysis.detectors.whatif as whatif_detector
from stragglerlab.analysis.detectors.base import load_run
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.cli import main as cli_main
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, write_run


def _times(run, repeats: int, residual: bool) -> tuple[float, float, int]:
    """(best, worst) seconds of an offline detect, and its number of findings."""
    real = whatif_detector.residual_findings
    if not residual:
        whatif_detector.residual_findings = lambda run, found, diagnose: []
    try:
        seconds, n = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            n = len(WhatIfDetector().detect(run))
            seconds.append(time.perf_counter() - t0)
    finally:
        whatif_detector.residual_findings = real
    return min(seconds), max(seconds), n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dp", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print("| workers | ops | detect with the pass, s | without, s | ratio (best) | findings |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for dp in args.dp:
            cfg = SyntheticConfig(dp_size=dp, pp_size=4, n_steps=args.steps,
                                  slow_workers=(SlowWorker(3 % dp, 2, 1.8),))
            folder = Path(tmp) / f"dp{dp}"
            write_run(cfg, folder)
            if cli_main(["whatif", "--run", str(folder), "--quiet"]) != 0:
                raise SystemExit(f"stragglerlab whatif failed on {folder}")
            run = load_run(folder)
            w_best, w_worst, n_with = _times(run, args.repeats, residual=True)
            o_best, o_worst, n_without = _times(run, args.repeats, residual=False)
            print(f"| {dp * 4} | {len(run.trace)} | {w_best:.2f}-{w_worst:.2f} | "
                  f"{o_best:.2f}-{o_worst:.2f} | {w_best / o_best:.1f} | "
                  f"{n_with} / {n_without} |", flush=True)


if __name__ == "__main__":
    main()
