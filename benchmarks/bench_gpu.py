"""Benchmark: the slow-worker injector's CUDA mechanism (gpu_sleep) on a real GPU.

For each factor, a compute op (a chain of square matmuls) is timed with CUDA events
plain and stretched by `GpuStretch(factor)`, interleaved so clock drift hits both
alike; the ratio of the two is the factor the victim's GPU actually ran at. Goal:
within +-10 % of the requested factor. With `--run DIR` it also prints a
finished run's victim compute (its own steps before and inside the fault window,
from the run's trace) and the ground truth faults.json recorded.

    python benchmarks/bench_gpu.py [--factors 1.5 2.0] [--repeats 7] [--size 4096]
    python benchmarks/bench_gpu.py --run results/gpu-slow-dp2-pp2/0

Prints a Markdown table (pasted into benchmarks/README.md, "GPU").
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def op_ms(torch, a, stretch=None, chain: int = 5) -> float:
    """GPU time (ms) of one compute op: `chain` matmuls, stretched when given."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    if stretch is not None:
        stretch.start()
    x = a
    for _ in range(chain):
        x = a @ x
    if stretch is not None:
        stretch.finish()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def factor_table(factors: list[float], repeats: int, size: int) -> None:
    import torch

    from stragglerlab.injectors.gpu_sleep import GpuStretch

    a = torch.randn(size, size, device="cuda") / size ** 0.5
    for _ in range(3):
        op_ms(torch, a)  # warm-up (cuBLAS handles, clocks)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}; op: 5 matmuls {size}x{size} fp32\n")
    print("| factor asked | repeats | plain op (ms) | stretched op (ms) | factor measured "
          "(median) | min - max | within 10 % |")
    print("|---:|---:|---:|---:|---:|---|---|")
    for factor in factors:
        stretch = GpuStretch(factor)
        plain, slow, ratios = [], [], []
        for _ in range(repeats):
            p, s = op_ms(torch, a), op_ms(torch, a, stretch)
            plain.append(p)
            slow.append(s)
            ratios.append(s / p)
        med = statistics.median(ratios)
        print(f"| {factor:.2f} | {repeats} | {statistics.median(plain):.2f} | "
              f"{statistics.median(slow):.2f} | {med:.3f} | {min(ratios):.3f} - "
              f"{max(ratios):.3f} | {'yes' if abs(med / factor - 1) <= 0.10 else 'NO'} |")


def run_victim(run_dir: Path) -> None:
    """The victim's compute ops inside the window over its own before it, from the trace."""
    import pandas as pd

    faults = json.loads((run_dir / "faults.json").read_text())  # a list of fault records
    df = pd.read_parquet(run_dir / "trace.parquet")
    comp = df[df["optype"].isin(["forward-compute", "backward-compute"])]
    for f in faults:
        for t in f.get("targets", []):
            mine = comp[(comp["dp_rank"] == t["dp_rank"]) & (comp["stage"] == t["stage"])]
            dur = mine["duration"]
            first = f.get("first_step", 0)
            before = dur[mine["step"] < first].median()
            inside = dur[mine["step"] >= first].median()
            print(f"victim dp{t['dp_rank']}-pp{t['stage']}: compute median {1000 * before:.2f} ms "
                  f"before step {first}, {1000 * inside:.2f} ms from it: x{inside / before:.3f} "
                  f"(faults.json measured: {json.dumps(f.get('measured'))[:300]})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=float, nargs="+", default=[1.5, 2.0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--run", type=Path, help="also read this finished run's victim")
    args = ap.parse_args()
    if args.run is not None:
        run_victim(args.run)
        return
    factor_table(args.factors, args.repeats, args.size)


if __name__ == "__main__":
    main()
