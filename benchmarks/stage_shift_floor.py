"""How high the stage-shift statistic goes on stages with no slowed device: the evidence
behind `WhatIfDetectorConfig.shift_ratio` and the reading of `whatif_shift.py`.

Per run with stages, per stage: the statistic the rule thresholds, min(the stage's rise
over its own steps, that rise over the other stages' median rise on the same window),
after the job's settling steps are dropped, exactly as `slowed_stages` reads it. A stage
holding a slow-worker target (from faults.json) is a victim; every other stage is noise.

    python benchmarks/stage_shift_floor.py RUN [RUN ...] [--min-steps 3] [--json OUT]
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

from stragglerlab.analysis.detectors.base import load_run
from stragglerlab.analysis.detectors.whatif_device import normalized_compute
from stragglerlab.analysis.detectors.whatif_shift import settled_from, stage_rises
from stragglerlab.util.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_summary import fault_targets, floor_args, report  # noqa: E402


def stage_statistics(path: Path, min_steps: int) -> list[float] | None:
    """min(rise, rise over the others') per stage, None for a run without stages."""
    run = load_run(path)
    pp, dp = run.meta.pp_size, run.meta.dp_size
    steps = np.sort(run.trace["step"].unique())
    if pp < 2:
        return None
    grid = normalized_compute(run.trace, pp, dp, steps)
    if grid is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        own = np.nanmin(grid, axis=1)
    k = settled_from(run, steps)
    return [min(rise, rel) for rise, rel, _, _ in stage_rises(own[:, k:], min_steps)]


def main(argv: list[str] | None = None) -> int:
    args = floor_args(__doc__, argv)
    rows = []
    for path in args.runs:
        try:
            stats = stage_statistics(path, args.min_steps)
        except (InputError, OSError, KeyError, ValueError) as e:
            print(f"{path}: skipped ({e})", file=sys.stderr)
            continue
        if stats is None:
            continue
        victims = fault_targets(path, "slow-worker", "stage")
        row = {"run": str(path), "stages": stats,
               "victim": max((stats[s] for s in victims if s < len(stats)), default=None),
               "others": max((v for s, v in enumerate(stats) if s not in victims),
                             default=None)}
        rows.append(row)
        v = "-" if row["victim"] is None else f"{row['victim']:.3f}"
        o = "-" if row["others"] is None else f"{row['others']:.3f}"
        print(f"{path}: pp {len(stats)}, slowed stages {v}, others {o}")
    report(rows, "slowed stages", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
