"""The general what-if on a synthetic GPU DDP job, against the method applied to the job's
own plan (docs/unannotated.md, asynchronous ops).

kineto_synth.py writes an 8-rank job whose bucket all-reduces run on the NCCL stream beside
the backward on the compute stream, one rank computing --slow-factor times as long. Its
plan gives the method's answer directly: T is the planned mean step time, T_ideal the plan
with every rank computing the ranks' mean (median) factor. Printed beside the import's S,
and the import's S of the same job with every collective waited for (the model before
async ops; benchmarks/general_async_compare.py), and the clean job's S.

    .venv/bin/python benchmarks/general_async_synth.py [--mb 3] [--steps 6] [--out DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kineto_synth as ks  # noqa: E402
from general_async_compare import waited_for  # noqa: E402

from stragglerlab.analysis.whatif_general import whatif_general  # noqa: E402

RANKS, SLOW = 8, 3


def planned_step(layers: int, steps: int, factor: np.ndarray) -> float:
    """Mean planned step time (us) with these per-rank compute factors and no jitter."""
    per_bucket = max(1, layers // ks.BUCKETS)
    fwd = layers * ks.FWD_US * factor
    ready, nccl_free = fwd.copy(), np.zeros(factor.size)
    for b in range(ks.BUCKETS):
        n = per_bucket if b < ks.BUCKETS - 1 else layers - per_bucket * (ks.BUCKETS - 1)
        ready = ready + n * ks.BWD_US * factor
        start = np.maximum(ready, nccl_free)
        nccl_free = np.full(factor.size, start.max() + 900.0)
    return float((np.maximum(ready, nccl_free) + 400.0 * factor).max()) + 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=3.0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--slow-factor", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/general-async-synth"))
    a = ap.parse_args()
    layers = ks.layers_for(a.mb, a.steps)
    plan = ks.plan(RANKS, a.steps, layers, SLOW, a.slow_factor)
    T = float(np.mean([s["end"] for s in plan["steps"]]))
    factors = np.ones(RANKS)
    factors[SLOW] = a.slow_factor
    for name, slow in (("slow", SLOW), ("clean", -1)):
        traces = a.out / name
        ks.write_job(traces, RANKS, a.mb, a.steps, slow_rank=slow, slow_factor=a.slow_factor)
        subprocess.run([sys.executable, "-m", "stragglerlab", "import", "kineto", "--traces",
                        str(traces), "--out", str(a.out / f"{name}-import"), "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
    ops = {n: pd.read_parquet(a.out / f"{n}-import" / "ops.parquet") for n in ("slow", "clean")}
    for ideal, stat in (("mean", np.mean), ("median", np.median)):
        method = T / planned_step(layers, a.steps, np.full(RANKS, stat(factors)))
        got = whatif_general(ops["slow"], ideal).S
        old = whatif_general(waited_for(ops["slow"]), ideal).S
        clean = whatif_general(ops["clean"], ideal).S
        print(f"{ideal:6s} method (the plan) S {method:.3f} | import S {got:.3f} "
              f"({100 * (got / method - 1):+.1f} %) | every op waited for S {old:.3f} | "
              f"clean job S {clean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
