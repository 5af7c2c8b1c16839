"""Benchmark: the what-if in one process against its replays on a simulated Ray cluster.

`stragglerlab whatif --ray-address ADDR --ray-workers N` (stragglerlab/whatif_ray.py)
reads the trace and builds the frame in the driver, then splits the replays by steps
over N Ray actors. This starts a simulated cluster on this host
(`ray.cluster_utils.Cluster`: --nodes node processes, one CPU each, as the e2e tests
build it), writes a `stragglerlab synth` DP x PP job once (kept in --data, as
benchmarks/bench_whatif_scale.py does), then runs, --repeats rounds, the verb in one
process and with each N of --workers, every run a whole `stragglerlab whatif`
process, and checks that every run's whatif.json is byte for byte the one-process
run's.

Per run: wall time, CPU (user + sys) and peak RSS of the driver process (os.wait4),
and of each replay actor (its own getrusage, printed by the verb in its `ray workers:`
progress line); the Ray node processes themselves (raylets, GCS, object store) run
before and after and are not counted. The parts, from the verb's progress lines:
"to frame" (start-up, read and validate, graph, frame: the same work either way),
"attach + put" (attach to the cluster, put the value parts in the object store),
"replays" (every replay and the statistics between them: what the actors split) and
"rest" (launch attribution, outputs, exit).

    python benchmarks/bench_whatif_ray.py [--dp 256] [--pp 16] [--microbatches 16]
        [--steps 8] [--nodes 3] [--workers 1 2 3] [--repeats 2] [--data DIR]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _scale():
    """benchmarks/bench_whatif_scale.py (its synth, run_measured and fmt): not a package."""
    spec = importlib.util.spec_from_file_location("bench_whatif_scale",
                                                  HERE / "bench_whatif_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def split_parts(log: Path) -> dict[str, float]:
    """Seconds per part of one run, from its progress lines' own clock (see the doc)."""
    marks: dict[str, float] = {}
    for line in log.read_text().splitlines():
        m = re.match(r"\[\s*([0-9.]+)s\] (.*)", line)
        if not m:
            continue
        t, msg = float(m.group(1)), m.group(2)
        if msg.startswith("frame:"):
            marks["frame"] = t
        elif msg.startswith("replays on "):
            marks["put"] = t
        elif msg.startswith("computed M_W"):
            marks["replays"] = t  # the last one (the last compute ideal)
    put = marks.get("put", marks["frame"])
    return {"attach + put": put - marks["frame"], "replays": marks["replays"] - put}


def actor_costs(log: Path) -> list[tuple[float, float]]:
    """(CPU s, peak MiB) of each replay actor, from the verb's `ray workers:` line."""
    text = log.read_text()
    line = re.search(r"ray workers: (.*)", text)
    if not line:
        return []
    return [(float(c), float(p)) for c, p in
            re.findall(r"CPU ([0-9.]+) s, peak ([0-9]+) MiB", line.group(1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, default=256)
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=3, help="simulated Ray nodes, 1 CPU each")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "whatif-scale")
    args = ap.parse_args()
    if max(args.workers) > args.nodes:
        sys.exit("--workers: at most --nodes (one CPU a node)")
    scale = _scale()
    run, _ = scale.synth(args.data, args.dp, args.pp, args.microbatches, args.steps)
    ops = scale.n_ops(run)
    print(f"input: {run} ({ops:,} ops)", file=sys.stderr)

    from ray.cluster_utils import Cluster

    store = 512 * 1024 * 1024
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "object_store_memory": store})
    for _ in range(args.nodes - 1):
        cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    configs = [None, *args.workers]
    rows: dict = {c: [] for c in configs}
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            reference = None
            for r in range(args.repeats):
                for n in configs:
                    out, log = work / f"out-{n}", work / f"log-{n}.txt"
                    cmd = [sys.executable, "-m", "stragglerlab", "whatif", "--run", str(run),
                           "--out", str(out)]
                    if n is not None:
                        cmd += ["--ray-address", cluster.address, "--ray-workers", str(n)]
                    code, wall, cpu, peak, _parts = scale.run_measured(cmd, log)
                    if code:
                        sys.exit(f"whatif failed ({code}): {log.read_text()[-2000:]}")
                    doc = (out / "whatif.json").read_bytes()
                    if reference is None:
                        reference = doc
                    elif doc != reference:
                        sys.exit(f"whatif.json with {n} Ray workers differs from one process")
                    parts = split_parts(log)
                    actors = actor_costs(log)
                    rows[n].append({"wall": wall, "cpu": cpu, "peak": peak, **parts,
                                    "actors_cpu": sum(c for c, _ in actors),
                                    "actor_peak": max((p for _, p in actors), default=0.0)})
                    print(f"repeat {r + 1} workers={n or 'one process'}: {wall:.1f} s wall, "
                          f"driver CPU {cpu:.1f} s, {peak:.0f} MiB; replays "
                          f"{parts['replays']:.1f} s; actors {actors}", file=sys.stderr)
    finally:
        cluster.shutdown()
    load_after = os.getloadavg()

    def col(n, key, digits):
        return scale.fmt([row[key] for row in rows[n]], digits)

    print(f"\nDP {args.dp} x PP {args.pp} ({args.dp * args.pp:,} workers, {ops:,} ops, "
          f"{args.steps} steps); simulated cluster of {args.nodes} nodes x 1 CPU on this "
          f"host ({os.cpu_count()} cores); {args.repeats} runs each, median (min–max); "
          f"whatif.json byte for byte the same in every run; load average (1, 5, 15 min) "
          f"{' / '.join(f'{a:.1f}' for a in load_before)} before, "
          f"{' / '.join(f'{a:.1f}' for a in load_after)} after:\n")
    print("| run | wall (s) | driver CPU (s) | driver peak (MiB) | actors' CPU (s) | "
          "actor peak (MiB) | attach + put (s) | replays (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in configs:
        name = "one process" if n is None else f"Ray, {n} worker{'s' * (n > 1)}"
        ray_cols = ("–", "–", "–") if n is None else (
            col(n, "actors_cpu", 1), col(n, "actor_peak", 0), col(n, "attach + put", 1))
        print(f"| {name} | {col(n, 'wall', 1)} | {col(n, 'cpu', 1)} | {col(n, 'peak', 0)} | "
              f"{ray_cols[0]} | {ray_cols[1]} | {ray_cols[2]} | {col(n, 'replays', 1)} |")


if __name__ == "__main__":
    main()
