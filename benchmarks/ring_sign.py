"""The ring rule's sign test, read on run folders: per stage ring of 3 or more DP ranks,
the slower regime of the ring's transfers and, per rank, its ring score held over
`min_steps` steps (the rule's statistic, a share of the step) and its mean over the regime
in standard errors (`over_time.sign_t`; the rule names a rank at 4 or more; no test
without a slower regime of 2 x min_steps steps).

    python benchmarks/ring_sign.py RUN_DIR... [--min-steps 3]

A ring whose every link is slowed alike (`shared-ring-dp4-two`) reads low t on every rank;
one throttled link (`shared-ring-dp4`) reads high t on its victim (docs/detectors.md,
"A ring slowed alike is not a link")."""

from __future__ import annotations

import argparse

import numpy as np

from stragglerlab.analysis.detectors.signatures import mean_step_time
from stragglerlab.analysis.detectors.whatif_ring import sign_test_steps
from stragglerlab.analysis.over_time import sign_t
from stragglerlab.analysis.ring_order import (
    ALL_GATHER,
    MIN_RING,
    REDUCE_SCATTER,
    excess_grid,
    neighbour_scores,
    stage_transfers,
)
from stragglerlab.run.run_folder import RunFolder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders")
    ap.add_argument("--min-steps", type=int, default=3, help="the rule's min_steps")
    args = ap.parse_args()
    w = args.min_steps
    for run in args.runs:
        folder = RunFolder.open(run)
        trace, dp = folder.trace(), folder.meta.dp_size
        if dp < MIN_RING:
            print(f"{run}: DP {dp}, no ring of {MIN_RING} or more")
            continue
        steps = np.sort(trace["step"].unique())
        step_s = mean_step_time(trace)
        rs, ag = (stage_transfers(trace, op, dp, steps) for op in (REDUCE_SCATTER, ALL_GATHER))
        for stage in rs:
            if rs[stage] is None or ag[stage] is None:
                continue
            # the rule's own composition (whatif_ring.ring_links)
            score = neighbour_scores(excess_grid(rs[stage]), excess_grid(ag[stage]), dp,
                                     lambda s=step_s: s)
            held = np.lib.stride_tricks.sliding_window_view(score, w, axis=0).min(axis=2)
            regime = sign_test_steps(rs[stage], ag[stage], steps, w)
            where = f"no slower regime of {2 * w} steps or more: no sign test" \
                if regime is None else \
                f"regime {int(steps[regime][0])}-{int(steps[regime][-1])}"
            cells = []
            for v in range(dp):
                t = "-" if regime is None else f"{sign_t(score[regime, v]):+.1f}"
                cells.append(f"{v}: held {held[:, v].max():+.3f} t {t}")
            print(f"{run} stage {stage} ({where}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
