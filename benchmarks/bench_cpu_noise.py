"""How steady this host's CPU is: the same matmul, repeated in one process.

A GPU runs one kernel in the same time step after step; the torch workloads' pacing
(workloads/torch_pacing.py) exists because a vCPU does not. This times one
`rows x hidden @ hidden x 4 hidden` matmul (the MLP stack's up-projection) `--repeats`
times, 5 products each, on one thread, and reports the thread CPU time and wall time
per repeat: mean, CV, min and max (the first 5 repeats are warm-up, left out).

    .venv/bin/python benchmarks/bench_cpu_noise.py [--rows 1024] [--hidden 256] [--repeats 60]

Measured on this project's 2-vCPU host: idle (load 0.4), CPU per repeat mean
58.3 ms, CV 0.113, min 45.9, max 68.7 ms; an hour later, a test run on the other vCPU,
mean 36.0 ms, CV 0.059, min 33.0, max 44.0 ms (the host's speed itself moved 1.6x).
Wall time tracks CPU time in both.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(1)
    x, w = torch.randn(args.rows, args.hidden), torch.randn(args.hidden, 4 * args.hidden)
    cpu, wall = [], []
    for _ in range(args.repeats + 5):
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(5):
            x @ w
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    for name, v in (("cpu", cpu[5:]), ("wall", wall[5:])):
        m = statistics.fmean(v)
        print(f"{name}: mean {1e3 * m:.1f} ms, CV {statistics.stdev(v) / m:.3f}, "
              f"min {1e3 * min(v):.1f}, max {1e3 * max(v):.1f} ms over {len(v)} repeats")


if __name__ == "__main__":
    main()
