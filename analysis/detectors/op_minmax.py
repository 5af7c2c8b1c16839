"""op-minmax: per-interval min/max of each op type's time across ranks, Megatron style.

Modelled on Megatron-LM's StragglerDetector (megatron/core/utils.py), which every
`log_interval` iterations reports, per timed section, the minimum and maximum of
the per-rank time and the ranks holding them ("MnRtt/Rnk | MxRtt/Rnk"). Megatron
prints these and sets no threshold; this baseline adds one. Per reporting
interval of `window_steps` steps, per pipeline stage (stages legitimately differ
in cost) and per op type, the per-rank time is the rank's mean time in that op
type per step; when max/min exceeds the threshold *and* the gap is worth at
least `min_excess_fraction` of a step, the outlier rank is reported:

* compute and optimizer ops: the max rank, root cause `slow-worker`;
* P2P ops and embedding-grads-all-reduce (pairs across stages): the max rank,
  root cause `net-throttle`;
* DP collectives and clip-main-grad (one group across the compared ranks): the
  *min* rank, root cause `net-throttle`. In a collective the early ranks absorb the
  wait, so the shortest duration marks the rank the others waited for; blaming the
  max rank would name the victims.

Communication time includes waiting, so its natural spread is wide (our clean runs
reach max/min 2.4 in grads-reduce-scatter); communication uses its own, higher
threshold, and a `net-throttle` outlier is dropped in an interval where a compute or GC
outlier exists (that straggler explains the waiting). Only whole intervals are
compared (a shorter tail joins the one before), and a rank is reported once it is
an outlier for the same root cause in `min_intervals` intervals.

GC: `gc_pause_s` (our runs' measured pauses; the `gc` op's duration when the
column is absent) is compared against zero: a rank pausing at least
`gc_min_fraction` of a step on average is reported with root cause `gc-pauses`, and the
pause time is subtracted from the op it fell into before the op comparisons.

    python -c "from analysis.detectors import get_detector, load_run; \
print([f.to_dict() for f in get_detector('op-minmax').detect(load_run('RUN_DIR'))])"
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run
from stragglerlab.analysis.detectors.baseline_common import step_times, window_ids
from stragglerlab.analysis.detectors.config_ranges import FRACTION_MIN, in_range
from stragglerlab.trace.schema import DP_COLLECTIVE_OPS, OpType

_WORKER_OPS = frozenset({OpType.FORWARD_COMPUTE.value, OpType.BACKWARD_COMPUTE.value,
                         OpType.OPTIMIZER.value})
# Groups that span exactly the ranks compared (one stage's DP ranks; clip spans all).
_MIN_RANK_OPS = frozenset({o.value for o in DP_COLLECTIVE_OPS}
                          | {OpType.OPTIMIZER_CLIP_MAIN_GRAD.value})


@dataclass(frozen=True, kw_only=True)
class OpMinMaxConfig:
    """Thresholds of the op-minmax detector."""

    window_steps: int = 5
    """Reporting interval, steps (Megatron: `--log-interval`, 100 by default; our runs have
    20-30 steps)."""
    ratio_threshold: float = 4.0 / 3.0
    """max/min across ranks of a compute/optimizer op that makes an outlier. Megatron has no
    threshold; 4/3 matches nvrx's 0.75 relative score."""
    comm_ratio_threshold: float = 3.0
    """max/min for communication ops, whose time includes waiting (clean runs reach 2.4)."""
    min_excess_fraction: float = 0.05
    """The max-min gap must be at least this fraction of the interval's median step time."""
    gc_min_fraction: float = 0.05
    """A rank pausing for GC at least this fraction of the median step time is reported."""
    min_intervals: int = 2
    """A (root cause, rank) must be flagged in at least this many reporting intervals: on a
    shared host one interval of interference is common (our noisy clean seed-1 run), a
    straggler persists. Costs one interval of detection latency."""

    def __post_init__(self) -> None:
        for name in ("ratio_threshold", "comm_ratio_threshold"):
            in_range(self, name, 1, why="max/min across ranks is >= 1: under 1 every op "
                     "of every interval is an outlier (and 0 divides the confidence by 0)")
        in_range(self, "gc_min_fraction", FRACTION_MIN,
                 why="a GC pause's strength is its share over this floor (0 divides by 0)")


def _confidence(ratio: float, threshold: float) -> float:
    """0.5 at the threshold, 1 at twice it (log scale); monotone in the ratio."""
    if not math.isfinite(ratio):
        return 1.0
    return float(min(1.0, 0.5 + 0.5 * math.log(max(ratio, threshold) / threshold) / math.log(2)))


class OpMinMaxDetector(Detector):
    """Per-interval min/max of every op type's per-rank time within each stage."""

    name = "op-minmax"
    description = "Megatron-style per-interval min/max of op time across ranks of a stage"

    def __init__(self, config: OpMinMaxConfig | None = None) -> None:
        self.config = config or OpMinMaxConfig()

    def detect(self, run: Run) -> list[Finding]:
        """Outlier ranks per interval, merged into one finding per (root cause, rank)."""
        if run.outcome == "failed" or run.trace.empty:
            return []  # a baseline: a hang or crash is not a straggler it can name
        cfg = self.config
        # Whole intervals only (Megatron reports at an interval's end); a short tail
        # joins the interval before it.
        win = window_ids(run.trace["step"], cfg.window_steps, cfg.window_steps)
        trace, win = run.trace[win >= 0], win[win >= 0]
        if trace.empty:
            return []  # too few steps seen to compare anything
        st = step_times(trace)
        st_win = st.groupby(window_ids(st.index, cfg.window_steps, cfg.window_steps)).median()
        n_steps = trace.groupby(win)["step"].nunique()
        win_steps = trace.groupby(win)["step"].agg(["min", "max"])
        flags = pd.concat([self._op_flags(trace, win, st_win, n_steps),
                           self._gc_flags(trace, win, st_win, n_steps)], ignore_index=True)
        if flags.empty:
            return []
        link = flags["cause"] == RootCause.NET_THROTTLE.value
        explained = flags.loc[~link, "win"].unique()
        flags = flags[~link | ~flags["win"].isin(explained)]
        return [self._finding(run, cause, int(rank), rows, win_steps, st_win)
                for (cause, rank), rows in flags.groupby(["cause", "rank"], sort=True)
                if rows["win"].nunique() >= self.config.min_intervals]

    def _op_flags(self, trace: pd.DataFrame, win: np.ndarray, st_win: pd.Series,
                  n_steps: pd.Series) -> pd.DataFrame:
        """One row per (interval, stage, op type) whose min/max gap passes the thresholds."""
        cfg = self.config
        own = trace["duration"].to_numpy()
        if "gc_pause_s" in trace:
            own = np.clip(own - trace["gc_pause_s"].fillna(0.0).to_numpy(), 0.0, None)
        keep = (trace["optype"] != OpType.GC.value).to_numpy()
        frame = pd.DataFrame({"win": win[keep], "stage": trace["stage"].to_numpy()[keep],
                              "rank": trace["rank"].to_numpy()[keep],
                              "optype": trace["optype"].astype(str).to_numpy()[keep],
                              "own": own[keep]})
        per = frame.groupby(["win", "stage", "optype", "rank"])["own"].sum()
        per = per / n_steps.reindex(per.index.get_level_values("win")).to_numpy()
        wide = per.unstack("rank")
        stats = pd.DataFrame({
            "max": wide.max(axis=1), "min": wide.min(axis=1),
            "argmax": wide.idxmax(axis=1), "argmin": wide.idxmin(axis=1),
            "n": wide.notna().sum(axis=1)}).reset_index()
        stats = stats[stats["n"] >= 2]
        worker = stats["optype"].isin(_WORKER_OPS)
        min_rank = stats["optype"].isin(_MIN_RANK_OPS)
        ratio = stats["max"] / stats["min"].clip(lower=1e-12)
        excess = stats["max"] - stats["min"]
        step = st_win.reindex(stats["win"]).to_numpy()
        threshold = np.where(worker, cfg.ratio_threshold, cfg.comm_ratio_threshold)
        hit = (ratio >= threshold) & (excess >= cfg.min_excess_fraction * step)
        return pd.DataFrame({
            "win": stats["win"], "rank": np.where(min_rank, stats["argmin"], stats["argmax"]),
            "cause": np.where(worker, RootCause.SLOW_WORKER.value, RootCause.NET_THROTTLE.value),
            "optype": stats["optype"], "ratio": ratio, "threshold": threshold,
            "excess_s": excess,
        })[hit.to_numpy()].astype({"rank": np.int64})

    def _gc_flags(self, trace: pd.DataFrame, win: np.ndarray, st_win: pd.Series,
                  n_steps: pd.Series) -> pd.DataFrame:
        """One row per (interval, rank) whose GC pause per step passes gc_min_fraction."""
        if "gc_pause_s" in trace:
            pause = trace["gc_pause_s"].fillna(0.0).to_numpy()
        else:
            pause = np.where(trace["optype"] == OpType.GC.value, trace["duration"], 0.0)
        per = pd.Series(pause).groupby([win, trace["rank"].to_numpy()]).sum()
        per.index.names = ["win", "rank"]
        per = per / n_steps.reindex(per.index.get_level_values("win")).to_numpy()
        step = st_win.reindex(per.index.get_level_values("win")).to_numpy()
        floor = self.config.gc_min_fraction * step
        hit = per[(per >= floor) & (per > 0)].reset_index(name="excess_s")
        hit_floor = floor[((per >= floor) & (per > 0)).to_numpy()]
        # Compared against zero (no pause): the ratio to the floor plays the ratio's part.
        return hit.assign(cause=RootCause.GC_PAUSES.value, optype="gc-pause",
                          ratio=hit["excess_s"].to_numpy() / hit_floor, threshold=1.0)

    def _finding(self, run: Run, cause: str, rank: int, rows: pd.DataFrame,
                 win_steps: pd.DataFrame, st_win: pd.Series) -> Finding:
        wins = np.sort(rows["win"].unique())
        rel = rows["ratio"] / rows["threshold"]
        strongest = rows.loc[rel.idxmax()]
        # Extra time per step this rank's outliers cost, over the interval's step time.
        extra = rows.groupby("win")["excess_s"].sum() / st_win.reindex(wins).to_numpy()
        return Finding(
            ranks=[run.rank_ref(rank)],
            first_step=int(win_steps.loc[wins.min(), "min"]),
            last_step=int(win_steps.loc[wins.max(), "max"]),
            root_cause=RootCause(cause),
            confidence=_confidence(float(strongest["ratio"]), float(strongest["threshold"])),
            estimated_slowdown=1.0 + float(np.median(extra.to_numpy())),
            detail={
                "ops": sorted(rows["optype"].unique().tolist()),
                "max_ratio": round(float(strongest["ratio"]), 4),
                "max_ratio_op": str(strongest["optype"]),
                "intervals_flagged": int(len(wins)),
                "intervals": int(len(win_steps)),
                "interval_first_steps": [int(win_steps.loc[w, "min"]) for w in wins],
                "config": asdict(self.config),
            },
        )
