"""The picture of docs/detectors.md's "Over time" section: one run across ranks and over time.

Left: each rank's time in each op kind that moved, per step (across ranks: every rank
alike, so no peer is faster). Right: the job's step time per step with the change-point
window `analysis/over_time.py` finds (over time: the same ops against their own earlier
steps).

    python benchmarks/over_time_picture.py RUN docs/img/job-wide-ring.png
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from stragglerlab.analysis.detectors import load_run  # noqa: E402
from stragglerlab.analysis.over_time import kind_times, over_time  # noqa: E402


def main(run_dir: str, out: str) -> int:
    """Draw the two panels of `run_dir` into `out`."""
    run = load_run(run_dir)
    ot = over_time(run.trace, run.meta.dp_size, run.meta.pp_size)
    kt = kind_times(run.trace)
    kind = ot.kinds[0].kind if ot.kinds else "grads-reduce-scatter"
    grid = (kt[kt["kind"] == kind].pivot_table(index="rank", columns="step", values="time_s")
            .reindex(columns=ot.steps))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4), constrained_layout=True)
    im = a.imshow(grid.to_numpy(), aspect="auto", cmap="viridis",
                  extent=(ot.steps[0] - 0.5, ot.steps[-1] + 0.5, grid.index.max() + 0.5,
                          grid.index.min() - 0.5))
    a.set_xlabel("step")
    a.set_ylabel("rank")
    a.set_yticks(grid.index.to_numpy())
    a.set_title(f"across ranks: {kind} per rank (s)", fontsize=10)
    fig.colorbar(im, ax=a)
    b.plot(ot.steps, ot.step_s, "o-", color="k")
    if ot.change is not None:
        last = ot.steps[-1] if ot.change.last_step is None else ot.change.last_step
        b.axvspan(ot.change.first_step - 0.5, last + 0.5, color="tab:red", alpha=0.15,
                  label=f"change-point: {ot.change.ratio:.1f}x")
        b.legend(loc="upper left", fontsize=8)
    b.set_xlabel("step")
    b.set_ylabel("step time (s)")
    b.set_ylim(0, float(np.max(ot.step_s)) * 1.15)
    b.set_title("over time: the job's step time", fontsize=10)
    fig.suptitle(ot.note() or run_dir, fontsize=9)
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
