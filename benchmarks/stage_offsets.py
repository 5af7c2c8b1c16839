"""Per stage, how far each compute op type's mean time sits from its mean over all stages.

Why: the mean ideal of the what-if method gives every op of a type the same time,
so a stage whose ops are systematically slower bounds the step and lifts a clean
run's S. On CPU ranks under CFS quotas, 1F1B's back-to-back ops (stage 0's
forwards after a backward, the last stage's backwards after its forward) are
slower than ops that follow a wait (benchmarks/README.md, "Timing noise").
Prints, per run folder, the ratio of each (op type, stage)'s mean compute time to
the op type's mean over all workers, averaged over DP ranks, and the run's S per
stage from whatif/whatif.json when present.

    python benchmarks/stage_offsets.py results/clean-dp4-pp4/0 [RUN ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from stragglerlab.run.run_folder import RunFolder
from stragglerlab.util.errors import InputError

COMPUTE = ("forward-compute", "backward-compute")


def stage_offsets(trace: pd.DataFrame) -> pd.DataFrame:
    """[op type x stage] mean compute time over the op type's mean over all workers."""
    compute = trace[trace["optype"].astype(str).isin(COMPUTE)]
    if compute.empty:
        raise InputError("the trace has no forward/backward compute ops")
    per_worker = compute.groupby([compute["optype"].astype(str), "stage", "dp_rank"],
                                 observed=True)["duration"].mean()
    rel = per_worker / per_worker.groupby(level=0).transform("mean")
    return rel.groupby(level=[0, 1]).mean().unstack("stage")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (trace.parquet)")
    args = parser.parse_args(argv)
    for run in args.runs:
        try:
            table = stage_offsets(RunFolder(path=run).trace())
        except (InputError, OSError) as e:
            print(f"{run}: {e}", file=sys.stderr)
            return 2
        print(f"{run}: mean compute time per stage over the op type's mean")
        print(table.round(3).to_string())
        whatif = run / "whatif" / "whatif.json"
        if whatif.is_file():
            w = json.loads(whatif.read_text())
            by_stage = " ".join(f"{v:.3f}" for v in w["slowdown_by_stage"].values())
            print(f"S {w['slowdown']:.3f}; S by stage {by_stage}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
