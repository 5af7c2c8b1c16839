"""Benchmark: `stragglerlab whatif` time and peak memory as the trace grows.

Builds larger traces by replicating trace-ST's DP ranks (dp = 16, 64, 256,
1024; 4 stages; 32 steps; ~3.5M ops at 1024), runs the whole CLI process on
each and reports wall time, peak resident memory (the child's ru_maxrss) and
that the slowdown equals trace-ST's (copies of DP ranks change no number).

    python benchmarks/bench_whatif.py [--dp 16 64 256 1024] [--out benchmarks/data]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference-traces"


def replicate(df: pd.DataFrame, meta: dict, dp: int) -> tuple[pd.DataFrame, dict]:
    """Copy the DP ranks of df until there are dp of them; ranks renumbered dp-major."""
    dp0, pp = meta["dp_size"], meta["pp_size"]
    copies = dp // dp0
    parts = []
    for c in range(copies):
        part = df.copy()
        part["dp_rank"] = (part["dp_rank"].astype(np.int64) + c * dp0).astype(np.int16)
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    out["rank"] = (out["stage"].astype(np.int64) * dp + out["dp_rank"]).astype(np.int32)
    new_meta = dict(meta, dp_size=dp, world_size=dp * pp * meta["tp_size"] * meta["dsp_size"])
    return out, new_meta


def run_one(trace: Path, meta: Path, out: Path, timelines: bool) -> dict:
    cmd = [sys.executable, "-m", "stragglerlab", "whatif", "--trace", str(trace),
           "--meta", str(meta), "--out", str(out), "--quiet"]
    if not timelines:
        cmd.append("--no-timelines")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        raise SystemExit(f"whatif failed on {trace}:\n{proc.stderr}")
    result = json.loads((out / "whatif.json").read_text())
    # ru_maxrss of children is the max over all children so far: sizes run ascending.
    return {"wall_s": wall, "peak_mib": max(peak_kib, before) / 1024,
            "slowdown": result["slowdown"]}


def main() -> None:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "data"))
    ap.add_argument("--no-timelines", action="store_true", help="skip writing the timelines")
    args = ap.parse_args()
    if not (REFERENCE / "trace-ST.parquet").exists():
        raise SystemExit(f"reference traces not found at {REFERENCE}")
    base = pd.read_parquet(REFERENCE / "trace-ST.parquet")
    meta = yaml.safe_load((REFERENCE / "meta-ST.yaml").read_text())
    expected = json.loads((REFERENCE / "result-ST.json").read_text())["blocking_slowdown"]
    out_root = Path(args.out)
    rows = []
    for dp in sorted(args.dp):
        df, m = replicate(base, meta, dp)
        folder = out_root / f"dp{dp}"
        folder.mkdir(parents=True, exist_ok=True)
        df.to_parquet(folder / "trace.parquet", index=False)
        (folder / "meta.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
        r = run_one(folder / "trace.parquet", folder / "meta.yaml", folder / "out",
                    timelines=not args.no_timelines)
        r.update(dp=dp, ops=len(df), same_s=abs(r["slowdown"] / expected - 1) < 1e-6)
        rows.append(r)
        print(f"dp={dp:5d} ops={len(df):>9,} wall={r['wall_s']:6.2f}s "
              f"peak={r['peak_mib']:7.1f} MiB S={r['slowdown']:.6f} "
              f"(= trace-ST: {r['same_s']})", file=sys.stderr, flush=True)
    print("\n| dp | ops | wall time (s) | peak RSS (MiB) | time / op (µs) | S equals trace-ST |")
    print("|---:|---:|---:|---:|---:|:---:|")
    for r in rows:
        print(f"| {r['dp']} | {r['ops']:,} | {r['wall_s']:.2f} | {r['peak_mib']:.0f} | "
              f"{1e6 * r['wall_s'] / r['ops']:.2f} | {'yes' if r['same_s'] else 'NO'} |")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"\nsize x{b['ops'] / a['ops']:.0f} -> time x{b['wall_s'] / a['wall_s']:.1f} "
              f"(linear would be x{b['ops'] / a['ops']:.0f}; the fixed start-up cost "
              f"of ~{a['wall_s']:.1f}s dominates small sizes)")


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
