"""Benchmark: the parts of `build_frame` (analysis/frame.py) on run folders, CPU seconds each.

build_frame scatters every trace row into [node, step, DP rank] arrays; at 16,384
workers it is the what-if's fastest-growing part (benchmarks/README.md, "The what-if
from 1,024 to 16,384 workers"). This times its steps one by one on each run folder's
trace, after reading it: the rows' slots (row_slots), the completeness count over
every slot (np.bincount), the scatter of start_ts and duration, and the derived
transfer durations and launch delays.

    python benchmarks/bench_frame_parts.py RUN [RUN ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from stragglerlab.analysis import frame as fr
from stragglerlab.analysis.graph import build_graph
from stragglerlab.trace.trace_io import read_trace


def parts(run: Path) -> dict[str, float]:
    df, meta = read_trace(str(run / "trace.parquet"), str(run / "meta.yaml"))
    graph = build_graph(df[(df.step == df.step.min()) & (df.dp_rank == 0)], meta, str(run))
    took: dict[str, float] = {}

    def timed(name, fn, *args):
        t = time.process_time()
        out = fn(*args)
        took[name] = time.process_time() - t
        return out

    steps, flat = timed("row_slots", fr.row_slots, df, graph, meta, str(run))
    size = graph.n_nodes * len(steps) * meta.dp_size
    timed("bincount", np.bincount, flat, None, size)

    def scatter():
        start, duration = np.empty(size), np.empty(size)
        start[flat] = df["start_ts"].to_numpy(np.float64)
        duration[flat] = df["duration"].to_numpy(np.float64)
        shape = (graph.n_nodes, len(steps), meta.dp_size)
        return start.reshape(shape), duration.reshape(shape)

    start, duration = timed("scatter", scatter)
    timed("transfer", fr._transfer_durations, graph, start, duration)
    timed("launch delays", fr._launch_delays, graph, start, duration)
    took["ops"] = len(df)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    names = ["row_slots", "bincount", "scatter", "transfer", "launch delays"]
    print("| run | ops | " + " | ".join(f"{n} (s)" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for run in args.runs:
        p = parts(run)
        print(f"| {run.name} | {p['ops']:,} | " + " | ".join(f"{p[n]:.2f}" for n in names)
              + " |", flush=True)


if __name__ == "__main__":
    main()
