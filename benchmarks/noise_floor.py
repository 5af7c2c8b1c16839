"""The clean-run S that per-op timing noise alone gives, beside the runs' measured S.

Why: the mean ideal of the what-if method gives every op of a type the same time, so
a job whose ops merely jitter (no straggler at all) simulates faster than it ran: in
1F1B each op waits for the later of two inputs, and DP waits for the slowest replica,
so the actual critical path collects the slow draws. This prints S of synthetic
DP x PP jobs (workloads/synthetic.py) whose every duration has an i.i.d. relative
noise `jitter`, and, for each run folder given, the run's own compute-op noise (the
coefficient of variation of forward / backward durations within their (op type,
stage), pooled), its measured S, and the S its noise predicts on its own layout.

    python benchmarks/noise_floor.py                                  # the S vs jitter table
    python benchmarks/noise_floor.py results/clean-dp4-pp4/0 [RUN ...] --seeds 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.whatif import analyze
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace

COMPUTE = ("forward-compute", "backward-compute")
LAYOUTS = ((4, 4, 16), (2, 2, 4))
"""(dp, pp, microbatches) of the table: clean-dp4-pp4 and clean-dp2-pp2."""


def op_noise(trace: pd.DataFrame) -> float:
    """Pooled coefficient of variation of compute durations within (op type, stage, step).

    Within the step: a step in which every op ran slower (host load) lengthens the actual
    and the ideal alike, so it is left out of the noise that lifts S."""
    compute = trace[trace["optype"].astype(str).isin(COMPUTE)]
    if compute.empty:
        raise InputError("the trace has no forward/backward compute ops")
    groups = compute.groupby([compute["optype"].astype(str), "stage", "step"], observed=True)
    rel = compute["duration"] / groups["duration"].transform("mean") - 1.0
    return float(np.sqrt(np.mean(rel.to_numpy() ** 2)))


def synthetic_s(dp: int, pp: int, microbatches: int, jitter: float, seeds: int,
                forward_s: float = 0.135, backward_s: float = 0.27) -> list[float]:
    """What-if S of clean synthetic jobs with i.i.d. relative noise `jitter`, per seed."""
    out = []
    for seed in range(seeds):
        cfg = SyntheticConfig(dp_size=dp, pp_size=pp, n_microbatches=microbatches, n_steps=7,
                              seed=seed, forward_s=forward_s, backward_s=backward_s,
                              p2p_latency_s=0.004, dp_collective_s=0.05, jitter=jitter)
        df, meta = synthesize_trace(cfg)
        out.append(analyze(df, meta, f"synthetic jitter {jitter} seed {seed}").slowdown)
    return out


def _layout(trace: pd.DataFrame) -> tuple[int, int, int, float, float]:
    """(dp, pp, microbatches, mean forward s, mean backward s) of a traced run."""
    fwd = trace[trace["optype"].astype(str) == "forward-compute"]
    bwd = trace[trace["optype"].astype(str) == "backward-compute"]
    return (int(trace["dp_rank"].max()) + 1, int(trace["stage"].max()) + 1,
            int(fwd["mb_id"].max()) + 1, float(fwd["duration"].mean()),
            float(bwd["duration"].mean()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders (trace.parquet)")
    parser.add_argument("--seeds", type=int, default=4, help="synthetic jobs per point")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if not args.runs:
        print("S of a clean synthetic job vs i.i.d. op noise (mean over seeds, min-max)")
        print("jitter  " + "  ".join(f"dp{d}-pp{p} m{m:<2}      " for d, p, m in LAYOUTS))
        for jitter in (0.0, 0.02, 0.05, 0.07, 0.10):
            cells = []
            for d, p, m in LAYOUTS:
                s = synthetic_s(d, p, m, jitter, args.seeds)
                cells.append(f"{np.mean(s):.3f} ({min(s):.3f}-{max(s):.3f})")
            print(f"{jitter:<6}  " + "  ".join(cells), flush=True)
        return 0
    print("run: compute-op noise (CV), measured S, S predicted from that noise (min-max)")
    for run in args.runs:
        try:
            trace = RunFolder(path=run).trace()
            cv = op_noise(trace)
            dp, pp, m, fwd, bwd = _layout(trace)
        except (InputError, OSError) as e:
            print(f"{run}: {e}", file=sys.stderr)
            return 2
        whatif = run / "whatif" / "whatif.json"
        measured = json.loads(whatif.read_text())["slowdown"] if whatif.is_file() else float("nan")
        s = synthetic_s(dp, pp, m, cv, args.seeds, fwd, bwd)
        print(f"{run}: dp{dp}-pp{pp} m{m}  CV {cv:.3f}  S {measured:.3f}  "
              f"predicted {np.mean(s):.3f} ({min(s):.3f}-{max(s):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
