"""Result records of the what-if analysis, and their JSON form (`whatif.json`).

Times are seconds; slowdowns are ratios (>= 1 means slower than ideal).

    result.to_json()  # -> dict with our documented field names (see README)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stragglerlab.meta import JobMeta


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
        return {k: v.mean() / self.t_ideal for k, v in table.items()}

    def step_slowdown(self) -> dict[str, float]:
        """Per-step S."""
        return {str(s): float(a / b) for s, a, b in
                zip(self.steps, self.step_time_nodelay.values, self.step_time_ideal.values)}

    def to_json(self) -> dict:
        """The documented `whatif.json` layout (see README, 'whatif.json')."""
        per_step = {str(s): i for i, s in enumerate(self.steps)}
        ideal = self.step_time_ideal.values

        def per_step_table(table: dict) -> dict:
            return {s: {str(k): float(v.values[i] / ideal[i]) for k, v in table.items()}
                    for s, i in per_step.items()}

        return {
            "schema": "stragglerlab.whatif/1",
            "job_meta": self.job_meta.to_dict(),
            "n_ops": self.n_ops,
            "steps": self.steps,
            "slowdown": self.slowdown,
            "waste": self.waste,
            "straggling": self.slowdown >= 1.1,
            "simulation_discrepancy": self.simulation_discrepancy,
            "t_actual_s": self.step_time_base.mean(),
            "t_nodelay_s": self.step_time_nodelay.mean(),
            "t_ideal_s": self.t_ideal,
            "step_time_actual_s": self.step_time_base.as_dict(),
            "step_time_nodelay_s": self.step_time_nodelay.as_dict(),
            "step_slowdown": self.step_slowdown(),
            "slowdown_by_optype": {k: float(v) for k, v in
                                   self.slowdown_by(self.by_optype).items()},
            "slowdown_by_dp_rank": {str(k): float(v) for k, v in
                                    self.slowdown_by(self.by_dp_rank).items()},
            "slowdown_by_stage": {str(k): float(v) for k, v in
                                  self.slowdown_by(self.by_stage).items()},
            "step_slowdown_by_optype": per_step_table(self.by_optype),
            "step_slowdown_by_dp_rank": per_step_table(self.by_dp_rank),
            "step_slowdown_by_stage": per_step_table(self.by_stage),
            "worker_score": self.worker_score.tolist(),
            "top_workers": [{"dp_rank": d, "stage": p} for d, p in self.top_workers],
            "m_w": self.m_w.to_json(),
            "m_s": self.m_s.to_json(),
            "fwd_bwd_correlation": self.fwd_bwd_correlation,
            "sequence_imbalance": (self.fwd_bwd_correlation or 0.0) >= 0.9,
            "notes": self.notes,
        }
