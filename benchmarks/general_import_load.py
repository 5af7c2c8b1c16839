"""Load time and peak memory of the general (unannotated) Kineto importer on synthetic
production-size traces, against `json.loads` of one whole file.

    python benchmarks/general_import_load.py --ranks 2 --mb 100 --steps 5 [--dir /tmp/big]

Writes `--ranks` gzipped traces of about `--mb` MB of JSON each (a DDP-like GPU
job: compute kernels with their CUDA launches and CPU ops, NCCL all-reduce
kernels with torch's args, ProfilerSteps; rank 1 is 1.3x slower), then, each
in a fresh process so peak RSS is its own:

* `stream`: stragglerlab.importers.kineto_general.load_ranks + build_general +
  the what-if (parallel processes; peak RSS of the parent and of the largest
  reader process, as the readers report it);
* `json.loads`: gzip.decompress + json.loads of rank 0's file only (what a
  whole-document parser costs for one rank).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_trace(path: Path, rank: int, world: int, mb: float, steps: int) -> None:
    """One rank's synthetic trace, streamed to a gzip file."""
    rnd = random.Random(rank)
    slow = 1.3 if rank == 1 else 1.0
    per_step = int(mb * 1e6 / steps / 700)  # ~700 bytes per kernel + launch + cpu op
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", '
                f'"rank": {rank}, "world_size": {world}}}, "traceEvents": [\n')
        t, corr, first = 1e12, 1, True
        for s in range(steps):
            t0 = t
            evs = []
            for i in range(per_step):
                dur = rnd.uniform(5, 15) * slow
                evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                            "ts": t, "dur": 3.0, "args": {"External id": corr,
                                                          "Input Dims": [[64, 64], [64, 64]]}})
                evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                            "pid": 1, "tid": 1, "ts": t + 1, "dur": 1.0,
                            "args": {"correlation": corr, "External id": corr}})
                evs.append({"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f16f16",
                            "pid": 0, "tid": 7, "ts": t + 2, "dur": dur,
                            "args": {"correlation": corr, "stream": 7, "device": 0,
                                     "grid": [64, 1, 1], "block": [128, 1, 1]}})
                corr += 1
                t += dur + 0.5
                if i % (per_step // 10 or 1) == per_step // 10 - 1:  # 10 all-reduces a step
                    seq = s * 10 + i // (per_step // 10 or 1)
                    wait = (1.3 - slow) * 10 * (per_step // 10)  # fast ranks wait for rank 1
                    args = {"Collective name": "allreduce", "Process Group Name": "0",
                            "Process Group Ranks": list(range(world)), "Seq": seq,
                            "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                            "correlation": corr, "stream": 20}
                    evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                                "pid": 1, "tid": 1, "ts": t, "dur": 1.0,
                                "args": {"correlation": corr}})
                    evs.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 20, "ts": t,
                                "name": "ncclDevKernel_AllReduce_Sum_f16_RING_LL",
                                "dur": wait + 300.0, "args": args})
                    corr += 1
                    t += wait + 300.5
            evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                        "pid": 1, "tid": 1, "ts": t0, "dur": t - t0})
            for e in evs:
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write('\n], "baseTimeNanoseconds": 0}\n')


def child(mode: str, files: list[str]) -> None:
    """Run one measurement in this (fresh) process and print a JSON line."""
    t = time.perf_counter()
    if mode == "stream":
        sys.path.insert(0, str(ROOT))
        from stragglerlab.analysis.whatif_general import whatif_general
        from stragglerlab.importers.kineto_general import build_general, load_ranks
        ev = load_ranks(files, processes=min(len(files), 8))
        t_load = time.perf_counter() - t
        res = build_general(ev)
        wi = whatif_general(res.ops)
        extra = {"load_s": t_load, "S": wi.S, "top": wi.top_workers,
                 "events": res.report["events"],
                 "peak_rss_mb_largest_reader": res.report["reader_peak_rss_mb"]}
    else:
        doc = json.loads(gzip.decompress(Path(files[0]).read_bytes()))
        extra = {"events": len(doc["traceEvents"])}
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"mode": mode, "wall_s": time.perf_counter() - t,
                      "peak_rss_mb_parent": self_kb / 1024,
                      "peak_rss_mb_direct_children": kids_kb / 1024, **extra}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/stragglerlab-big-traces")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1:])
        return
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(a.ranks):
        p = d / f"rank{r}-{a.mb:g}mb.json.gz"
        if not p.exists():
            write_trace(p, r, a.ranks, a.mb, a.steps)
        files.append(str(p))
    with gzip.open(files[0], "rb") as f:
        raw = sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))
    print(f"{a.ranks} ranks x {raw / 1e6:.0f} MB JSON ({Path(files[0]).stat().st_size / 1e6:.0f}"
          " MB gz) each")
    for mode in ("stream", "json.loads"):
        out = subprocess.run([sys.executable, __file__, "--child", mode, *files],
                             capture_output=True, text=True, check=True)
        print(out.stdout.strip())


if __name__ == "__main__":
    main()
