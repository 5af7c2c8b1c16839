"""Benchmark: detector cost as the job grows (offline and online), on synthetic traces.

Synthetic DP x PP jobs (workloads/synthetic.py; pp 4, 4 microbatches,
`--steps` steps, one slow worker from the middle step) at growing DP sizes;
per detector, the wall time of an offline `detect` and of an online replay,
and whether the slow worker was found. The whatif detector's online mode
re-analyses a sliding window of steps, so its online cost grows with steps,
not with steps squared.

    python benchmarks/bench_detectors.py [--dp 8 64 256] [--steps 24] [--detector whatif ...]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from stragglerlab.analysis.detectors import Run, detector_names, get_detector
from stragglerlab.analysis.detectors.base import load_run
from stragglerlab.cli import main as cli_main
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, write_run


def make_run(dp: int, steps: int, root: Path) -> tuple[Run, tuple[int, int]]:
    """A synthetic run folder under root, analysed by `stragglerlab whatif` (the workflow's
    step before detection; the whatif detector reads its whatif.json, not timed here)."""
    victim = (dp // 2, 1)
    cfg = SyntheticConfig(dp_size=dp, pp_size=4, n_microbatches=4, n_steps=steps,
                          slow_workers=(SlowWorker(victim[0], victim[1], 1.6,
                                                   first_step=steps // 2),))
    folder = root / f"synthetic-dp{dp}"
    write_run(cfg, folder)
    if cli_main(["whatif", "--run", str(folder), "--quiet"]) != 0:
        raise SystemExit(f"stragglerlab whatif failed on {folder}")
    return load_run(folder), victim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--detector", nargs="+", default=None)
    args = parser.parse_args()
    names = args.detector or detector_names()
    print("| dp | ops | detector | offline s | online s | online s/step | found victim |")
    print("|---|---|---|---|---|---|---|")
    root = Path(tempfile.mkdtemp(prefix="bench-detectors-"))
    for dp in args.dp:
        run, (vd, vs) = make_run(dp, args.steps, root)
        for name in names:
            t0 = time.perf_counter()
            findings = get_detector(name).detect(run)
            offline = time.perf_counter() - t0
            t0 = time.perf_counter()
            get_detector(name).detect_online(run)
            online = time.perf_counter() - t0
            found = any((r.dp_rank, r.stage) == (vd, vs) for f in findings for r in f.ranks)
            print(f"| {dp} | {len(run.trace):,} | {name} | {offline:.2f} | {online:.2f} | "
                  f"{online / args.steps:.3f} | {'yes' if found else 'no'} |", flush=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
