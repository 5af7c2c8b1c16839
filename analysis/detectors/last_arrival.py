"""last-arrival: the rank the others wait for at collectives, as HTA / TraceLens do.

Modelled on the rank-straggler views of Holistic Trace Analysis and TraceLens:
for every instance of a collective, the rank that *arrived last* (latest
start_ts) is the one the others waited for. Instances here: each DP collective
(params-all-gather, grads-reduce-scatter, separate-grads-all-reduce) of one
stage and step across its DP ranks, whose members do the same work, so that
"fair share" (1/group size) means something. Collectives whose members sit on
different stages are left out: under 1F1B the first stage finishes its backward
last, so it is structurally last at embedding-grads-all-reduce and
optimizer-clip-main-grad in every clean run (counting them blamed stage 0 of our
clean dp2-pp2 runs). P2P pairs are left out too (their matching needs the
dependency model; the what-if detector has it). Per rank: how often it arrived last against its fair
share (1/group size per instance) and the wait it caused (latest start - median
start of the group, summed). A rank is flagged (root cause `slow-worker`) when a
binomial test says it is last far more often than chance (p < `alpha`) *and*
the wait it causes is at least `min_wait_fraction` of a step.

Failed runs (hang/crash): HTA sees each rank's trace, and a rank whose trace
stops early is the one every peer waits for at its next collective. So the ranks
with strictly the fewest finished steps in `run.last_step_by_rank` (the runs'
status files) are flagged as well (root cause `hang`), at the step the job stalled in (the first
step the other ranks did not finish); the error
record of run.json is not read (that would be the ground truth, not an
observation).

    python -c "from analysis.detectors import get_detector, load_run; \
print([f.to_dict() for f in get_detector('last-arrival').detect(load_run('RUN_DIR'))])"
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run
from stragglerlab.analysis.detectors.baseline_common import step_times
from stragglerlab.analysis.detectors.config_ranges import FRACTION_MIN, in_range
from stragglerlab.trace.schema import DP_COLLECTIVE_OPS

_DP_OPS = tuple(o.value for o in DP_COLLECTIVE_OPS)


@dataclass(frozen=True, kw_only=True)
class LastArrivalConfig:
    """Thresholds of the last-arrival detector."""

    alpha: float = 1e-3
    """Significance of "last far more often than its fair share" (one-sided binomial test)."""
    min_wait_fraction: float = 0.05
    """The wait a rank causes, per step, must be at least this fraction of the median step."""

    def __post_init__(self) -> None:
        in_range(self, "alpha", 0, 1, hi_open=True,
                 why="it is a significance level: at 1 every p-value passes, every rank is named")
        in_range(self, "min_wait_fraction", FRACTION_MIN,
                 why="a finding's confidence divides the wait by it (0 divides by 0)")


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exact (log-space sum; no scipy)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    i = np.arange(k, n + 1)
    terms = (log_fact[n] - log_fact[i] - log_fact[n - i]
             + i * math.log(p) + (n - i) * math.log1p(-p))
    top = terms.max()
    return float(min(1.0, math.exp(top) * np.exp(terms - top).sum()))


def collective_instances(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per (DP collective instance, member): group id, step, rank, arrival, group stats.

    An instance is one (step, stage, optype, seq_id) across the stage's DP ranks.
    Columns: group, step, rank, start_ts, size (members), last (this member arrived
    last; ties go to the first row), wait_s (latest - median start of the group, s).
    """
    inst = trace.loc[trace["optype"].astype(str).isin(_DP_OPS),
                     ["step", "stage", "optype", "seq_id", "rank", "start_ts"]]
    keys = ["step", "stage", "optype", "seq_id"]
    inst = inst.assign(group=inst.groupby(keys, observed=True).ngroup())[
        ["group", "step", "rank", "start_ts"]]
    inst["size"] = inst.groupby("group")["start_ts"].transform("size")
    inst = inst[inst["size"] >= 2].reset_index(drop=True)
    if inst.empty:
        return inst.assign(last=pd.Series(dtype=bool), wait_s=pd.Series(dtype=float))
    by = inst.groupby("group")["start_ts"]
    inst["last"] = False
    inst.loc[by.idxmax().to_numpy(), "last"] = True
    inst["wait_s"] = by.transform("max") - by.transform("median")
    return inst


def _onset(flag: np.ndarray, steps: np.ndarray) -> int:
    """First step from which the rank is flagged in at least half of the remaining steps."""
    remaining = np.cumsum(flag[::-1])[::-1] / np.arange(len(flag), 0, -1)
    ok = np.flatnonzero(flag & (remaining >= 0.5))
    return int(steps[ok[0]] if ok.size else steps[0])


class LastArrivalDetector(Detector):
    """Ranks that arrive last at collectives far more often than chance and cost a real wait."""

    name = "last-arrival"
    description = "HTA/TraceLens-style: the rank that arrives last at collectives"

    def __init__(self, config: LastArrivalConfig | None = None) -> None:
        self.config = config or LastArrivalConfig()

    def detect(self, run: Run) -> list[Finding]:
        """Late-arrival findings, plus the rank that stopped early in a failed run."""
        findings = self._trace_findings(run) if not run.trace.empty else []
        if run.outcome == "failed":
            findings += self._stopped_findings(run)
        return findings

    def detect_online(self, run: Run) -> list[Finding]:
        """Replay step by step; a stalled rank is reported once the trace ends (the stall)."""
        findings = super().detect_online(run)
        if run.outcome == "failed":
            at = int(run.trace["step"].max()) if not run.trace.empty else 0
            for f in self._stopped_findings(run):
                f.detected_at_step = at
                findings.append(f)
        return findings

    def _trace_findings(self, run: Run) -> list[Finding]:
        cfg = self.config
        inst = collective_instances(run.trace)
        if inst.empty:
            return []
        st = step_times(run.trace)
        median_step = float(st.median())
        inst["share"] = 1.0 / inst["size"]
        inst["caused_s"] = np.where(inst["last"], inst["wait_s"], 0.0)
        per = inst.groupby("rank").agg(n=("last", "size"), k=("last", "sum"),
                                       expected=("share", "sum"), caused_s=("caused_s", "sum"))
        n_steps = max(1, int(run.trace["step"].nunique()))
        per["wait_fraction"] = per["caused_s"] / n_steps / max(median_step, 1e-12)
        per["p_value"] = [binomial_sf(int(k), int(n), e / n)
                          for k, n, e in per[["k", "n", "expected"]].itertuples(index=False)]
        hit = per[(per["p_value"] < cfg.alpha) & (per["wait_fraction"] >= cfg.min_wait_fraction)]
        if hit.empty:
            return []
        # Per-step evidence for the span: last more often than its share that step, and
        # a wait worth min_wait_fraction of that step.
        step_stats = inst.groupby(["rank", "step"]).agg(
            k=("last", "sum"), expected=("share", "sum"), caused_s=("caused_s", "sum"))
        step_time = st.reindex(step_stats.index.get_level_values("step")).to_numpy()
        step_stats["flag"] = ((step_stats["k"] > step_stats["expected"])
                              & (step_stats["caused_s"] >= cfg.min_wait_fraction * step_time))
        findings = []
        for rank, row in hit.iterrows():
            mine = step_stats.xs(rank, level="rank")
            steps, flag = mine.index.to_numpy(), mine["flag"].to_numpy()
            last_step = int(steps[flag].max()) if flag.any() else int(steps.max())
            strength = 1.0 - math.exp(-row["wait_fraction"] / cfg.min_wait_fraction)
            findings.append(Finding(
                ranks=[run.rank_ref(int(rank))],
                first_step=min(_onset(flag, steps), last_step), last_step=last_step,
                root_cause=RootCause.SLOW_WORKER,
                confidence=float((1.0 - row["p_value"]) * strength),
                estimated_slowdown=1.0 + float(row["wait_fraction"]),
                detail={
                    "last_arrivals": int(row["k"]), "collectives": int(row["n"]),
                    "fair_share": round(float(row["expected"]), 3),
                    "p_value": float(row["p_value"]),
                    "wait_caused_s": round(float(row["caused_s"]), 6),
                    "wait_fraction_of_step": round(float(row["wait_fraction"]), 4),
                    "steps_flagged": int(flag.sum()),
                    "config": asdict(cfg),
                },
            ))
        return findings

    def _stopped_findings(self, run: Run) -> list[Finding]:
        last = run.last_step_by_rank
        if len(last) < 2 or min(last.values()) == max(last.values()):
            return []
        low = min(last.values())
        stopped = sorted(r for r, s in last.items() if s == low)
        # The job stalls in the first step the other ranks could not finish (a rank hung
        # at a step's start still shows the step before as its last finished one).
        stalled = max(last.values()) + 1
        return [Finding(
            ranks=[run.rank_ref(r) for r in stopped], first_step=stalled, last_step=stalled,
            root_cause=RootCause.HANG,  # a trace that stops looks the same for a crash
            confidence=float(1.0 - len(stopped) / len(last)),
            detail={"last_step_by_rank": {str(r): int(s) for r, s in sorted(last.items())},
                    "reason": "trace stops early: the others wait for it at the next collective"},
        )]
