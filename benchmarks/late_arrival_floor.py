"""How high the late-arrival statistic goes without a late arrival: the evidence behind
`WhatIfDetectorConfig.late_arrival_ratio`.

The rule (`whatif_rules/late_arrival.py`) reads the method's launch attribution by DP
rank, which the what-if computes only where the job's launch slowdown reaches 1.03. On
clean runs it usually does not, so the detector's own noise-floor pass
(`stragglerlab noise-floor`) cannot read the statistic there. This script computes the
attribution on every run given whatever the job's launch slowdown, and prints per run
the statistic the rule thresholds: each DP rank's per-step launch slowdown over the
median of the other DP ranks', held over `min_steps` consecutive steps; the highest on a
net-delay victim (from faults.json) and the highest on every other DP rank.

    python benchmarks/late_arrival_floor.py RUN [RUN ...] [--min-steps 3] [--json OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from stragglerlab.analysis.detectors.whatif_rules.late_arrival import held_over, over_other_ranks
from stragglerlab.analysis.launch import LAUNCH_ATTRIBUTION_MIN, launch_decomposition
from stragglerlab.analysis.whatif import attribution_type, run_whatif
from stragglerlab.util.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_summary import fault_targets, floor_args, report  # noqa: E402

from stragglerlab.run.run_folder import RunFolder


def launch_by_dp_rank(folder: RunFolder) -> tuple[np.ndarray, float]:
    """[dp, steps] launch slowdown per DP rank and step (attribution forced), and the job's
    launch slowdown (actual over no-delay)."""
    meta = folder.meta
    run = run_whatif(folder.trace(), meta, str(folder.path))
    graph, frame = run.graph, run.frame
    t_nodelay = np.asarray(run.result.step_time_nodelay.values, dtype=float)
    t_base = np.asarray(run.result.step_time_base.values, dtype=float)
    # Forced past the 1.03 gate: the statistic is read where the what-if would not write it.
    launch = launch_decomposition(graph, frame, frame.sim_value(graph), meta.pp_size,
                                  attribution_type, LAUNCH_ATTRIBUTION_MIN)
    ratios = np.array([launch.by_dp_rank[d] / t_nodelay for d in sorted(launch.by_dp_rank)])
    return ratios, float(t_base.mean() / t_nodelay.mean())


def main(argv: list[str] | None = None) -> int:
    args = floor_args(__doc__, argv)
    rows = []
    for path in args.runs:
        try:
            folder = RunFolder(path=path)
            ratios, job = launch_by_dp_rank(folder)
        except (InputError, OSError, KeyError, ValueError) as e:
            print(f"{path}: skipped ({e})", file=sys.stderr)
            continue
        if ratios.shape[0] < 2 or ratios.shape[1] < args.min_steps:
            continue
        held = held_over(over_other_ranks(ratios), args.min_steps).max(axis=1)
        victims = fault_targets(folder.path, "net-delay", "dp_rank")
        others = [float(h) for d, h in enumerate(held) if d not in victims]
        row = {"run": str(path), "dp": int(ratios.shape[0]), "job_launch_slowdown": job,
               "victim": max((float(held[d]) for d in victims if d < len(held)), default=None),
               "others": max(others) if others else None}
        rows.append(row)
        v = "-" if row["victim"] is None else f"{row['victim']:.3f}"
        print(f"{path}: dp {row['dp']}, job launch {job:.3f}, victim {v}, "
              f"others {row['others']:.3f}")
    report(rows, "victims", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
