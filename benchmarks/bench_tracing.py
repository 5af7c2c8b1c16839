"""Benchmark: tracing overhead of a real training run (traced vs untraced, same config).

Runs a scenario (default clean-dp2-pp2) alternately with `run.trace` on and
off, several times each, and compares the mean step time (rank 0's own step
clock, warm-up steps excluded; measured the same way whether tracing is on
or not). Goal: overhead <= 2% of step time.

    python benchmarks/bench_tracing.py [--scenario clean-dp2-pp2] [--repeats 3] [--steps 31]
    python benchmarks/bench_tracing.py --launcher local --config config/gpu-scenarios.yaml \
        --scenario gpu-dp1-pp1      # CUDA: the tracer's synchronize + record per op

Prints one line per run and a Markdown summary (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stragglerlab.scenarios.scenario import load_scenario


def mean_step_time(record: dict, warmup: int) -> float:
    times = [t for s, t in record["step_time_s"].items() if int(s) >= warmup]
    return statistics.fmean(times)


def tracer_cost_per_step(ops_per_step: int, steps: int = 2000) -> float:
    """Seconds the tracer itself adds per step (record every op + flush), measured in-process."""
    from stragglerlab.trace.schema import OpType
    from stragglerlab.workloads.tracer import Tracer

    with tempfile.TemporaryDirectory() as tmp:
        tracer = Tracer(Path(tmp) / "rank0.bin")
        t0 = time.perf_counter()
        for step in range(steps):
            tracer.begin_step(step)
            for _ in range(ops_per_step):
                with tracer.op(OpType.FORWARD_COMPUTE, 0, 0, 0):
                    pass
            tracer.end_step()
        tracer.close()
        return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="clean-dp2-pp2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=31)
    ap.add_argument("--config", help="scenario YAML merged over the built-in ones")
    ap.add_argument("--launcher", choices=["ray", "local"], default="ray",
                    help="local: plain processes (workloads/local_launcher.py), no Ray")
    args = ap.parse_args()
    if args.launcher == "local":
        from stragglerlab.workloads.local_launcher import launch_local as launch
    else:
        from stragglerlab.workloads.launcher import launch
    results: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for traced in (True, False):  # alternate so drift hits both alike
                sc = load_scenario(args.scenario, args.config, overrides={
                    "run": {"trace": traced, "steps": args.steps}})
                record = launch(sc, Path(tmp) / f"{i}-{traced}")
                if record["outcome"] != "ok":
                    raise SystemExit(f"run failed: {record['error']}")
                t = mean_step_time(record, sc.run.warmup_steps)
                results[traced].append(t)
                print(f"repeat {i} traced={traced!s:5} mean step {1000 * t:7.2f} ms",
                      file=sys.stderr, flush=True)
    on, off = statistics.fmean(results[True]), statistics.fmean(results[False])
    spread = statistics.stdev(results[False]) / off if len(results[False]) > 1 else 0.0
    print("\n| scenario | repeats | traced step (ms) | untraced step (ms) | overhead | "
          "run-to-run spread (untraced) |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| {args.scenario} | {args.repeats} | {1000 * on:.2f} | {1000 * off:.2f} | "
          f"{100 * (on / off - 1):+.2f}% | {100 * spread:.2f}% |")
    # The end-to-end difference is within run-to-run noise, so also time the tracer alone
    # at this scenario's op count per rank and step (the busiest rank's).
    sc = load_scenario(args.scenario, args.config)
    ops = 4 * sc.parallel.microbatches + 8  # computes + P2P per microbatch, plus the tail
    cost = tracer_cost_per_step(ops)
    print(f"\ntracer alone: {1e6 * cost:.1f} µs per step of {ops} ops "
          f"= {100 * cost / off:.3f}% of the untraced step time")


if __name__ == "__main__":
    main()
