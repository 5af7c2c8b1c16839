"""Result records of the what-if analysis, and their JSON form (`whatif.json`): writer and reader.

Times are seconds; slowdowns are ratios (>= 1 means slower than ideal).
`stragglerlab whatif` computes the analysis once per trace and writes
everything downstream steps need into whatif.json (schema `SCHEMA`): the
metrics of the chosen compute ideal at the top level (field names in the
README), every compute ideal's metrics under `compute_ideals` (mean, the
paper's default, and median) with the per-step S_dp / S_stage the worker
heatmap and the `whatif` detector use, and the detector's graph-based
evidence (`comm_excess_by_worker_s`). Figures and detectors read it back
with `stragglerlab.run.whatif_record.WhatIfRecord.read` (the reader, apart) instead
of re-running the analysis.

    doc = result.to_json()                       # writer (stragglerlab whatif)
    view = result.ideal_view()                   # IdealView: slowdown, worker_score, ...
    scores = view.step_worker_score()            # [pp, dp, steps]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stragglerlab.run.validity import STRAGGLING_S as STRAGGLING_S  # the threshold, re-exported
from stragglerlab.run.validity import Validity, judge
from stragglerlab.run.whatif_summary import SUMMARY_KEY, WhatIfModel, WhatIfSummary, WorkerS
from stragglerlab.run.whatif_summary import StepS as SummarySteps
from stragglerlab.trace.meta import JobMeta

SCHEMA_NAME = "stragglerlab.whatif"
SCHEMA_VERSION = 2
"""Version of the whatif.json layout (2: compute_ideals and the detector's evidence added)."""
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"
"""The `schema` value of whatif.json."""
LAUNCH_TABLES = ("optype", "stage", "dp_rank")
"""Groupings of the launch-delay attribution (`launch_slowdown_by_<name>` in whatif.json)."""
COMPUTE_IDEALS = ("mean", "median")
"""Compute ideals whatif.json carries under `compute_ideals` (mean: the paper's default)."""


@dataclass
class StepSeries:
    """One value per traced step."""

    steps: list[int]
    """Step numbers, ascending."""
    values: np.ndarray
    """Value per step (seconds for step times)."""

    def mean(self) -> float:
        """Mean over steps."""
        return float(np.mean(self.values))

    def as_dict(self) -> dict[str, float]:
        """{step: value}."""
        return {str(s): float(v) for s, v in zip(self.steps, self.values)}


@dataclass
class FixMetric:
    """M_W or M_S (paper Eq. 5) with its parts."""

    t_ori: float
    """T: mean no-delay step time, s."""
    t_ideal: float
    """T_ideal: mean ideal step time, s."""
    t_rem: float
    """Mean step time of the no-delay frame with the selected ops idealized, s."""
    t_add: float
    """Mean step time of the ideal frame with the selected ops restored, s."""
    rem: float
    """(T - T_rem) / (T - T_ideal): the metric."""
    add: float
    """(T_add - T_ideal) / (T - T_ideal): the counterpart reported beside it."""

    def to_json(self) -> dict[str, float]:
        """Our field names."""
        return {k: float(getattr(self, k)) for k in
                ("t_ori", "t_ideal", "t_rem", "t_add", "rem", "add")}


@dataclass
class WhatIfResult:
    """Everything the what-if analysis computes for one job."""

    job_meta: JobMeta
    """Parallel layout."""
    steps: list[int]
    """Traced step numbers."""
    step_time_base: StepSeries
    """Actual step time from the trace, s."""
    step_time_nodelay: StepSeries
    """Simulated step time without launch delays (the paper's T), s."""
    step_time_ideal: StepSeries
    """Simulated step time with every op at its optype's ideal, s."""
    slowdown: float
    """S = T / T_ideal (Eq. 1)."""
    simulation_discrepancy: float
    """Actual / T: how far the simulation is from the trace (paper drops jobs > 1.05)."""
    by_optype: dict[str, StepSeries]
    """Step times of the ideal with one op type (P2P per direction) original, s."""
    by_dp_rank: dict[int, StepSeries]
    """Step times of the ideal with one DP rank original, s."""
    by_stage: dict[int, StepSeries]
    """Step times of the ideal with one stage original, s."""
    worker_score: np.ndarray
    """min(S_dp, S_stage) per worker, [pp_size, dp_size] (Fig. 14)."""
    top_workers: list[tuple[int, int]]
    """(dp_rank, stage) of the workers M_W fixes, highest score first."""
    m_w: FixMetric
    """Fixing the top ceil(3%) workers (Eq. 5)."""
    m_s: FixMetric
    """Fixing the last stage (0 without PP)."""
    fwd_bwd_correlation: float | None
    """Pearson correlation of forward vs backward compute durations (>= 0.9: sequence imbalance)."""
    n_ops: int
    """Rows analysed."""
    notes: list[str] = field(default_factory=list)
    """Warnings worth showing the user."""
    compute_ideal: str = "mean"
    """The statistic that idealized compute ops ('mean' or 'median')."""
    variants: dict[str, WhatIfResult] = field(default_factory=dict)
    """The same analysis under the other compute ideals, by name (written to whatif.json)."""
    comm_excess_by_worker: np.ndarray | None = None
    """Per worker [pp, dp]: its comm ops' transfer time over their op type's median, s."""
    force: bool = False
    """Assert the straggling verdict even where the reproduction gate withholds it."""
    regime_change: dict | None = None
    """A job-wide change of the step time within the trace (analysis.regime.RegimeChange's
    dict), None when there is none."""
    ideal_windows: list[dict] | None = None
    """`whatif --ideal-window N`: per window of N steps, its steps, S, ideal step (s) and
    per-step S with the ideal taken over that window only (analysis.whatif.windowed_ideal);
    None when not asked."""
    launch_by: dict[str, dict] | None = None
    """Launch-delay attribution, computed when the launch slowdown is >= 1.03 (else None):
    {"optype" | "stage" | "dp_rank": {group: StepSeries of the no-delay frame with that
    group's launch delays restored, s}}; op types include the artifact's `first-op`."""

    @property
    def validity(self) -> Validity:
        """The reproduction gate on this result (stragglerlab.run.validity)."""
        return judge(self.simulation_discrepancy - 1.0, force=self.force)

    def launch_slowdown_by(self, name: str) -> dict | None:
        """Mean launch slowdown per group of `name` (optype, stage, dp_rank), or None."""
        if self.launch_by is None:
            return None
        t = self.step_time_nodelay.mean()
        return {str(k): float(v.mean() / t) for k, v in self.launch_by[name].items()}

    def launch_step_ratios(self, name: str) -> tuple[list, np.ndarray] | None:
        """(groups, [groups, steps] launch slowdown per group of `name` and step), or None."""
        if self.launch_by is None:
            return None
        table = self.launch_by[name]
        t = np.asarray(self.step_time_nodelay.values, dtype=float)
        groups = list(table)
        return groups, np.array([np.asarray(table[k].values, dtype=float) / t for k in groups])

    def launch_step_slowdown_by(self, name: str) -> dict | None:
        """Per step {step: {group: launch slowdown}}, or None."""
        got = self.launch_step_ratios(name)
        if got is None:
            return None
        groups, ratios = got
        return {str(s): {str(k): float(ratios[j, i]) for j, k in enumerate(groups)}
                for i, s in enumerate(self.steps)}

    @property
    def waste(self) -> float:
        """1 - 1/S (Eq. 3): the fraction of resources lost to stragglers."""
        return 1.0 - 1.0 / self.slowdown

    @property
    def t_ideal(self) -> float:
        """Mean ideal step time, s."""
        return self.step_time_ideal.mean()

    def slowdown_by(self, table: dict) -> dict:
        """Turn a table of variant step times into mean slowdowns S_x."""
        t = self.t_ideal  # once, not per entry: a table holds one entry per DP rank
        return {k: v.mean() / t for k, v in table.items()}

    def step_slowdown(self) -> dict[str, float]:
        """Per-step S."""
        return {str(s): float(a / b) for s, a, b in
                zip(self.steps, self.step_time_nodelay.values, self.step_time_ideal.values)}

    def _per_step_table(self, table: dict) -> dict:
        """{step: {entry: its step time / the ideal step time}}. One array division for
        the whole [entries x steps] table (a table holds one entry per DP rank): the
        same quotients, in the same dtype, as dividing value by value."""
        if not table:
            return {str(s): {} for s in self.steps}
        keys = [str(k) for k in table]
        ratios = (np.array([np.asarray(v.values) for v in table.values()])
                  / np.asarray(self.step_time_ideal.values))
        return {str(s): dict(zip(keys, column))
                for s, column in zip(self.steps, ratios.T.tolist())}

    def ideal_json(self) -> dict:
        """The metrics that depend on the compute ideal (one `compute_ideals` entry)."""
        return {
            "slowdown": self.slowdown,
            "waste": self.waste,
            "straggling": self.validity.verdict(self.slowdown),
            "t_ideal_s": self.t_ideal,
            "step_slowdown": self.step_slowdown(),
            "slowdown_by_optype": {k: float(v) for k, v in
                                   self.slowdown_by(self.by_optype).items()},
            "slowdown_by_dp_rank": {str(k): float(v) for k, v in
                                    self.slowdown_by(self.by_dp_rank).items()},
            "slowdown_by_stage": {str(k): float(v) for k, v in
                                  self.slowdown_by(self.by_stage).items()},
            "step_slowdown_by_dp_rank": self._per_step_table(self.by_dp_rank),
            "step_slowdown_by_stage": self._per_step_table(self.by_stage),
            "worker_score": self.worker_score.tolist(),
            "top_workers": [{"dp_rank": d, "stage": p} for d, p in self.top_workers],
            "m_w": self.m_w.to_json(),
            "m_s": self.m_s.to_json(),
        }

    def to_json(self) -> dict:
        """The documented `whatif.json` layout (see README, 'whatif.json')."""
        ideals = {self.compute_ideal: self, **self.variants}
        return {
            "schema": SCHEMA,
            "job_meta": self.job_meta.to_dict(),
            "n_ops": self.n_ops,
            "steps": self.steps,
            "simulation_discrepancy": self.simulation_discrepancy,
            "validity": self.validity.to_dict(),
            "t_actual_s": self.step_time_base.mean(),
            "t_nodelay_s": self.step_time_nodelay.mean(),
            "step_time_actual_s": self.step_time_base.as_dict(),
            "step_time_nodelay_s": self.step_time_nodelay.as_dict(),
            **self.ideal_json(),
            "step_slowdown_by_optype": self._per_step_table(self.by_optype),
            "fwd_bwd_correlation": self.fwd_bwd_correlation,
            "sequence_imbalance": (self.fwd_bwd_correlation or 0.0) >= 0.9,
            "notes": self.notes,
            "regime_change": self.regime_change,
            **({} if self.ideal_windows is None else {"ideal_windows": self.ideal_windows}),
            "compute_ideal": self.compute_ideal,
            "compute_ideals": {name: ideals[name].ideal_json()
                               for name in sorted(ideals, key=_ideal_order)},
            "comm_excess_by_worker_s": (None if self.comm_excess_by_worker is None
                                        else np.asarray(self.comm_excess_by_worker).tolist()),
            **{f"launch_slowdown_by_{n}": self.launch_slowdown_by(n) for n in LAUNCH_TABLES},
            **{f"step_launch_slowdown_by_{n}": self.launch_step_slowdown_by(n)
               for n in LAUNCH_TABLES},
            SUMMARY_KEY: self.summary().to_json(),
        }

    def summary(self) -> WhatIfSummary:
        """This result in the names and units both what-if models share
        (stragglerlab.run.whatif_summary; whatif.json's `summary` block)."""
        pp, dp = np.shape(self.worker_score)
        stage, dp_rank = np.divmod(np.arange(pp * dp, dtype=np.int64), dp)
        t = np.asarray(self.step_time_nodelay.values, dtype=float)
        ideal = np.asarray(self.step_time_ideal.values, dtype=float)
        discrepancy = self.simulation_discrepancy - 1.0
        return WhatIfSummary(
            model=WhatIfModel.VOCABULARY, compute_ideal=self.compute_ideal,
            job_name=self.job_meta.trial_name or "", S=float(self.slowdown),
            waste=float(self.waste), T_s=self.step_time_nodelay.mean(),
            T_ideal_s=float(self.t_ideal), traced_step_s=self.step_time_base.mean(),
            discrepancy=float(discrepancy), straggling=self.validity.verdict(self.slowdown),
            validity=self.validity, M_W=float(self.m_w.rem), M_S=float(self.m_s.rem),
            by_kind={k: float(v) for k, v in self.slowdown_by(self.by_optype).items()},
            by_part={},
            by_dp_rank={int(k): float(v) for k, v in self.slowdown_by(self.by_dp_rank).items()},
            by_stage={int(k): float(v) for k, v in self.slowdown_by(self.by_stage).items()},
            by_rank=None,
            workers=WorkerS(rank=stage * dp + dp_rank, dp_rank=dp_rank, stage=stage,
                            s=np.asarray(self.worker_score, dtype=float).ravel()),
            top_workers=[int(p * dp + d) for d, p in self.top_workers],
            steps=SummarySteps(step=np.asarray(self.steps, dtype=np.int64), s=t / ideal,
                               traced_s=np.asarray(self.step_time_base.values, dtype=float),
                               t_s=t, t_ideal_s=ideal),
            regime_change=self.regime_change, fwd_bwd_correlation=self.fwd_bwd_correlation,
            notes=list(self.notes))

    def ideal_view(self) -> IdealView:
        """This result's ideal-dependent metrics as the reader's IdealView (no JSON round trip)."""
        ideal = self.step_time_ideal.values
        return IdealView(
            name=self.compute_ideal, slowdown=float(self.slowdown),
            t_ideal_s=float(self.t_ideal),
            slowdown_by_optype={k: float(v) for k, v in self.slowdown_by(self.by_optype).items()},
            s_dp=np.array([self.by_dp_rank[d].mean() for d in sorted(self.by_dp_rank)])
            / self.t_ideal,
            s_stage=np.array([self.by_stage[p].mean() for p in sorted(self.by_stage)])
            / self.t_ideal,
            step_s_dp=np.array([self.by_dp_rank[d].values for d in sorted(self.by_dp_rank)])
            / ideal,
            step_s_stage=np.array([self.by_stage[p].values for p in sorted(self.by_stage)])
            / ideal,
            worker_score=np.asarray(self.worker_score, dtype=float),
            top_workers=list(self.top_workers), m_w=self.m_w, m_s=self.m_s)


def _ideal_order(name: str) -> tuple[int, str]:
    return (COMPUTE_IDEALS.index(name) if name in COMPUTE_IDEALS else len(COMPUTE_IDEALS), name)


@dataclass
class IdealView:
    """One compute ideal's metrics, as read back from whatif.json (or taken from a result)."""

    name: str
    """'mean' (the paper's) or 'median'."""
    slowdown: float
    """S = T / T_ideal."""
    t_ideal_s: float
    """Mean ideal step time, s."""
    slowdown_by_optype: dict[str, float]
    """S_t per attribution bucket."""
    s_dp: np.ndarray
    """S_dp per DP rank, [dp]."""
    s_stage: np.ndarray
    """S_stage per stage, [pp]."""
    step_s_dp: np.ndarray
    """Per-step S_dp, [dp, steps]."""
    step_s_stage: np.ndarray
    """Per-step S_stage, [pp, steps]."""
    worker_score: np.ndarray
    """min(S_dp, S_stage), [pp, dp] (Fig. 14)."""
    top_workers: list[tuple[int, int]]
    """(dp_rank, stage) of the workers M_W fixes."""
    m_w: FixMetric
    """M_W (Eq. 5)."""
    m_s: FixMetric
    """M_S (last stage)."""

    @property
    def waste(self) -> float:
        """1 - 1/S."""
        return 1.0 - 1.0 / self.slowdown

    def step_worker_score(self) -> np.ndarray:
        """Per-step min(S_dp, S_stage), [pp, dp, steps] (exact; derived, not stored)."""
        return np.minimum(self.step_s_stage[:, None, :], self.step_s_dp[None, :, :])
