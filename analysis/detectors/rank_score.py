"""rank-score: per-rank relative compute performance score, as nvidia-resiliency-ext does.

Modelled on nvidia-resiliency-ext's straggler detector (`straggler/reporting.py`,
v0.4.1): per reporting interval, for every "kernel" (here: forward-compute and
backward-compute) the reference is the minimum over ranks of the per-rank median
duration; a rank's op score is reference / its median; the rank's score is the
mean of its op scores weighted by the total time spent in each op (nvrx: count x
mean). 1 = as fast as the best rank; a rank scoring below `threshold` is a
straggler (root cause `slow-worker`). nvrx leaves communication kernels out, so do we.

Two changes for pipeline-parallel jobs: ranks are compared only with ranks of
the same pipeline stage (stages legitimately differ in cost: stage 1 of our clean
dp2-pp2 runs computes ~17% more than stage 0), and a stage-level check scores
every stage's cost (its best rank's compute per step) against the lightest
stage; a stage scoring below `stage_threshold` yields a `stage-imbalance`
finding on all its ranks. With dp_size 1 only the stage check can fire.

    python -c "from analysis.detectors import get_detector, load_run; \
print([f.to_dict() for f in get_detector('rank-score').detect(load_run('RUN_DIR'))])"
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run
from stragglerlab.analysis.detectors.baseline_common import flagged_span, window_ids
from stragglerlab.analysis.detectors.config_ranges import in_range
from stragglerlab.trace.schema import COMPUTE_VALUES, OPTYPE_VALUES


@dataclass(frozen=True, kw_only=True)
class RankScoreConfig:
    """Thresholds of the rank-score detector."""

    threshold: float = 0.75
    """Flag a rank whose relative score (best rank's time / its time, 0..1) is below this.
    nvrx `Report.identify_stragglers(gpu_rel_threshold=0.75)` default, kept as is: a rank
    at least 1.33x slower than the best rank of its stage."""
    stage_threshold: float = 0.75
    """Flag a stage whose cost score (lightest stage's median cost / its own, whole run) is
    below this; same scale as `threshold` (a stage >= 1.33x the lightest). Our clean runs
    score ~0.85 for stage 1."""
    window_steps: int = 5
    """Reporting interval, steps (nvrx reports every `report_time_interval` seconds and
    resets its statistics; steps are our unit of time)."""
    ops: tuple[str, ...] = COMPUTE_VALUES
    """Optypes scored (nvrx: every non-NCCL kernel; here forward and backward compute)."""

    def __post_init__(self) -> None:
        for name in ("threshold", "stage_threshold"):
            in_range(self, name, 0, 1, why="a score is the reference's time over the rank's, "
                     "at most 1: over 1 the reference itself is flagged, every rank named")
        unknown = [op for op in self.ops if op not in OPTYPE_VALUES]
        if not self.ops or unknown:  # an unknown name would match no op, silently
            raise ValueError(f"ops must name op types of the trace schema, got "
                             f"{unknown or 'none'} (e.g. {', '.join(COMPUTE_VALUES)})")


def _confidence(score: float, threshold: float) -> float:
    """0.5 at the threshold, rising to 1 a quarter below it; monotone in the score gap."""
    return float(min(1.0, 0.5 + 2.0 * max(0.0, threshold - score)))


class RankScoreDetector(Detector):
    """Per-rank relative compute score within each stage, plus a stage-cost check."""

    name = "rank-score"
    description = "nvrx-style relative compute score per rank (within stage) + stage-cost check"

    def __init__(self, config: RankScoreConfig | None = None) -> None:
        self.config = config or RankScoreConfig()

    def detect(self, run: Run) -> list[Finding]:
        """Worker findings for low-scoring ranks, stage-imbalance findings for heavy stages."""
        if run.outcome == "failed":
            return []  # a baseline: a hang or crash is not a straggler it can name
        comp = run.trace[run.trace["optype"].isin(self.config.ops)]
        if "gc_pause_s" in comp:
            # nvrx times GPU kernels, which a host-side GC pause does not lengthen; our
            # CPU ops include it, so take the measured pause out.
            comp = comp.assign(duration=(comp["duration"] - comp["gc_pause_s"].fillna(0.0))
                               .clip(lower=0.0))
        # An op that took no time says nothing of its rank's speed; over it a score is 0/0
        # (`--set ops=gc` on a run whose gc ops are instants read slowdown 1e9).
        comp = comp[comp["duration"] > 0]
        if comp.empty:
            return []
        # Only whole intervals are scored, as nvrx reports at an interval's end; a
        # shorter tail joins the interval before it.
        comp = comp.assign(win=window_ids(comp["step"], self.config.window_steps,
                                          self.config.window_steps))
        comp = comp[comp["win"] >= 0]
        if comp.empty:
            return []  # too few steps seen to score anything
        win_steps = comp.groupby("win")["step"].agg(["min", "max"])
        findings = self._worker_findings(run, comp, win_steps)
        if run.meta.pp_size > 1 and comp["stage"].nunique() > 1:
            findings += self._stage_findings(run, comp, win_steps)
        return findings

    # -- worker scores ---------------------------------------------------------------------

    @staticmethod
    def rank_scores(comp: pd.DataFrame, by: str) -> pd.Series:
        """nvrx GPU relative score per ([by], stage, rank): time-weighted mean of ref/median."""
        per_op = comp.groupby([by, "stage", "rank", "optype"], observed=True)["duration"].agg(
            ["median", "sum"])
        ref = per_op["median"].groupby(level=[by, "stage", "optype"]).transform("min")
        op_score = ref / per_op["median"].clip(lower=1e-12)
        weight = per_op["sum"].clip(lower=1e-12)
        levels = [by, "stage", "rank"]
        return ((op_score * weight).groupby(level=levels).sum()
                / weight.groupby(level=levels).sum()).rename("score")

    def _worker_findings(self, run: Run, comp: pd.DataFrame,
                         win_steps: pd.DataFrame) -> list[Finding]:
        cfg = self.config
        by_win = self.rank_scores(comp, "win")
        by_step = self.rank_scores(comp, "step")
        low_win = by_win[by_win < cfg.threshold]
        low_step = by_step[by_step < cfg.threshold].reset_index()
        findings = []
        for rank, scores in low_win.groupby(level="rank"):
            wins = scores.index.get_level_values("win").to_numpy()
            steps = low_step.loc[low_step["rank"] == rank, "step"].to_numpy()
            first, last = flagged_span(steps, int(win_steps.loc[wins.min(), "min"]),
                                       int(win_steps.loc[wins.max(), "max"]))
            typical = float(np.median(scores.to_numpy()))
            all_scores = by_win.xs(rank, level="rank").droplevel("stage")
            findings.append(Finding(
                ranks=[run.rank_ref(int(rank))], first_step=first, last_step=last,
                root_cause=RootCause.SLOW_WORKER,
                confidence=_confidence(typical, cfg.threshold),
                estimated_slowdown=1.0 / max(typical, 1e-9),
                detail={
                    "score_median_flagged": round(typical, 4),
                    "score_min": round(float(scores.min()), 4),
                    "windows_flagged": int(len(wins)),
                    "windows": int(len(win_steps)),
                    "score_by_window_first_step": {
                        int(win_steps.loc[w, "min"]): round(float(s), 4)
                        for w, s in all_scores.items()},
                    "reference": "best rank of the same stage",
                    "config": asdict(cfg),
                },
            ))
        return findings

    # -- stage check -----------------------------------------------------------------------

    @staticmethod
    def stage_costs(comp: pd.DataFrame) -> pd.DataFrame:
        """Per (step, stage): the stage's cost (its best rank's compute that step, s) and score."""
        per_rank = comp.groupby(["step", "stage", "rank"])["duration"].sum()
        cost = per_rank.groupby(level=["step", "stage"]).min()
        score = cost.groupby(level="step").transform("min") / cost.clip(lower=1e-12)
        return pd.DataFrame({"cost_s": cost, "score": score})

    def _stage_findings(self, run: Run, comp: pd.DataFrame,
                        win_steps: pd.DataFrame) -> list[Finding]:
        # Partitioning is static, so the stage check uses the whole run, with medians
        # over steps so that a few disturbed steps (GC pauses land inside compute ops)
        # cannot make a stage look heavy.
        cfg = self.config
        per_step = self.stage_costs(comp)
        cost = per_step["cost_s"].groupby(level="stage").median()
        scores = cost.min() / cost.clip(lower=1e-12)
        low_step = per_step[per_step["score"] < cfg.stage_threshold].reset_index()
        findings = []
        for stage, score in scores[scores < cfg.stage_threshold].items():
            steps = low_step.loc[low_step["stage"] == stage, "step"].to_numpy()
            first, last = flagged_span(steps, int(win_steps["min"].min()),
                                       int(win_steps["max"].max()))
            dps = np.sort(comp.loc[comp["stage"] == stage, "dp_rank"].unique())
            findings.append(Finding(
                ranks=[run.worker(int(d), int(stage)) for d in dps],
                first_step=first, last_step=last, root_cause=RootCause.STAGE_IMBALANCE,
                confidence=_confidence(float(score), cfg.stage_threshold),
                estimated_slowdown=1.0 / max(float(score), 1e-9),
                detail={
                    "stage": int(stage),
                    "stage_score": round(float(score), 4),
                    "stage_cost_s_per_step": {int(k): round(float(v), 6) for k, v in cost.items()},
                    "steps_below_threshold": int(steps.size),
                    "reference": "lightest stage (its best rank's median compute per step)",
                    "config": asdict(cfg),
                },
            ))
        return findings
