"""§6 with a control inside the run: the slow worker's slowdown measured against the same
run's clean steps, not against another process run minutes earlier.

This host's speed drifts between processes (the non-victim workers' forward
can run 13 % faster in a slow run than in the clean run before it), and a ratio between two
runs carries that drift. The §6 scenarios therefore start the slow worker at a step
after at least `MIN_BASELINE_STEPS` clean traced steps, and for such a run:

* measured = mean step time over the fault's window / over the clean traced steps
  before it (run.json step times);
* in-run drift = the bystanders' (every worker but the victim) median compute op time in
  the window / before it (per op type and stage, the median of the ratios), reported
  beside each run as a diagnostic, not a correction: besides the host's own change (a
  load that came or went mid-run) it moves with the fault itself, since under CFS quotas
  a rank's op times depend on how long it waited (measured: 0.997-1.18 on runs with
  nothing else on the host);
* estimated = the what-if S of the fault's window over the what-if S of the clean
  steps before it (each analysed alone, with the mean and the median compute ideal). The
  clean steps are the measured ratio's denominator, and they straggle too: a clean run of
  this testbed reads S 1.03-1.16 from host noise alone (config/noise-floor.yaml, and 1.09-1.16
  on a 16-core host with no cgroup quota). The window's S counts that noise beside the fault
  while the measured ratio divides it out, so the estimate divides it out the same way:
  S_window / S_before = (T_window / T_before) x (ideal_before / ideal_window), which is the
  measured ratio whenever the simulation is exact and the ideal did not move. The window's
  own S is kept beside it (`window_slowdown`);
* the mean ideal's own shortfall: the slow worker is 1/N of every compute type's mean, so
  the window's ideal is itself slowed and the mean-ideal estimate falls short of the
  measured ratio by `costmodel.mean_ideal_shortfall` (at DP 4 x PP 4, 16 microbatches,
  level 3: -7.6 %; at least (S - 1) / N whatever the microbatches). That is the method's,
  not noise: `net_error` divides it out, leaving what timing noise and drift contribute;
* drift = what the control removes: the non-victim workers' median compute op time in
  the window over the same in the clean run of the same layout and seed (None without
  one); > 1 means the host ran slower during the slow run.

    m = in_run(run, clean_runs)        # InRun or None (no clean steps before the fault)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglerlab.analysis.fault_control import MIN_BASELINE_STEPS
from stragglerlab.analysis.whatif import ComputeIdeal, analyze
from stragglerlab.figures.data import RunSummary
from stragglerlab.scenarios.costmodel import mean_ideal_shortfall

_COMPUTE = ("forward-compute", "backward-compute")
DRIFT_TOLERANCE = 0.03
"""|in-run drift - 1| past which a run is labelled unsteady in the table (a diagnostic;
every run counts in the verdict)."""


@dataclass(frozen=True)
class InRun:
    """One slow run measured against its own clean steps."""

    measured: float
    """Mean step time in the fault window / before it."""
    in_run_drift: float
    """Bystanders' median compute op time in the window / before it (1: a steady host)."""
    estimated: dict[str, float]
    """What-if S of the window over that of the clean steps before it, by compute ideal
    (`mean`, `median`): the fault's own slowdown, against the same control as `measured`."""
    window_slowdown: dict[str, float]
    """What-if S of the window alone, by compute ideal (fault and host noise together)."""
    clean_slowdown: dict[str, float]
    """What-if S of the clean steps before the fault, by compute ideal (host noise alone)."""
    drift: float | None
    """Non-victim compute in the window over the clean run's (same seed)."""
    window: tuple[int, int]
    """First and last step of the fault window."""
    clean_steps: int
    """Clean traced steps before it."""
    workers: int
    """Workers in the job (each compute type's mean is over all of them)."""
    pp: int
    """Pipeline stages."""
    microbatches: int
    """Microbatches per step (forward ops of one rank in one step)."""

    @property
    def steady(self) -> bool:
        """The bystanders' compute did not change mid-run by more than DRIFT_TOLERANCE."""
        return abs(self.in_run_drift - 1.0) <= DRIFT_TOLERANCE

    def error(self, ideal: str) -> float | None:
        """estimated / measured - 1 for one ideal."""
        est = self.estimated.get(ideal)
        return None if est is None else est / self.measured - 1.0

    @property
    def mean_shortfall(self) -> float:
        """The mean ideal's own predicted error for this measured slowdown (negative), from
        the layout alone (`costmodel.mean_ideal_shortfall`)."""
        return mean_ideal_shortfall(max(self.measured, 1.0), pp=self.pp,
                                    microbatches=self.microbatches, workers=self.workers)

    def net_error(self, ideal: str) -> float | None:
        """The error left after the ideal's own predicted bias (none for the median): what
        timing noise and drift contribute."""
        err = self.error(ideal)
        if err is None:
            return None
        bias = self.mean_shortfall if ideal == ComputeIdeal.MEAN.value else 0.0
        return (1.0 + err) / (1.0 + bias) - 1.0


def _slow_fault(run: RunSummary) -> dict | None:
    faults = [f for f in run.faults if f.get("kind") == "slow-worker"]
    return faults[0] if len(faults) == 1 else None


def in_run(run: RunSummary, clean: list[RunSummary]) -> InRun | None:
    """The run's in-run measurement; None when the fault leaves too few clean steps."""
    fault = _slow_fault(run)
    times = run.step_times_s()
    if fault is None or not times:
        return None
    steps = np.array(sorted(times))
    first = int(fault.get("first_step") or 0)
    last = fault.get("last_step")
    last = int(steps.max()) if last is None else int(last)
    before = steps[steps < first]
    window = steps[(steps >= first) & (steps <= last)]
    if len(before) < MIN_BASELINE_STEPS or not len(window):
        return None
    raw = float(np.mean([times[s] for s in window]) / np.mean([times[s] for s in before]))
    trace = run.trace()
    part = trace[(trace["step"] >= first) & (trace["step"] <= last)]
    clean_part = trace[trace["step"].isin(before)]
    victims = {int(t["rank"]) for t in fault.get("targets") or []}
    in_run_drift = _drift(part, clean_part, victims) or 1.0
    window_s, clean_s = ({ideal.value: float(analyze(t, run.meta, where=str(run.path),
                                                     compute_ideal=ideal).slowdown)
                          for ideal in (ComputeIdeal.MEAN, ComputeIdeal.MEDIAN)}
                         for t in (part, clean_part))
    estimated = {k: window_s[k] / clean_s[k] for k in window_s}
    same = [c for c in clean if c.seed == run.seed and c.ok]
    drift = None
    if same:
        drift = _drift(part, same[0].trace(), victims)
    return InRun(measured=raw, in_run_drift=in_run_drift, estimated=estimated,
                 window_slowdown=window_s, clean_slowdown=clean_s, drift=drift,
                 window=(int(window.min()), int(window.max())), clean_steps=len(before),
                 workers=run.meta.world_size or run.meta.dp_size * run.meta.pp_size,
                 pp=run.meta.pp_size, microbatches=_microbatches(trace))


def _microbatches(trace) -> int:
    """Microbatches per step: the median count of one rank's forward ops in one step."""
    fwd = trace[trace["optype"].astype(str) == "forward-compute"]
    if fwd.empty:
        return 1
    return max(1, int(fwd.groupby(["rank", "step"]).size().median()))


def _drift(trace, reference, victims: set[int]) -> float | None:
    """The bystanders' (workers that are not victims) compute op time in `trace` over
    `reference`: the median over (op type, stage) of the ratio of their median durations.
    Per group, because forward and backward ops come in equal numbers: a median over both
    sits between the two kinds and jumps between them when a few ops move."""
    now, then = _bystander_compute(trace, victims), _bystander_compute(reference, victims)
    ratio = (now / then).dropna()
    ratio = ratio[ratio > 0]
    return float(ratio.median()) if len(ratio) else None


def _bystander_compute(trace, victims: set[int]):
    """Median compute op duration of the workers that are not victims, per (op type,
    stage), s."""
    ops = trace[trace["optype"].astype(str).isin(_COMPUTE) & ~trace["rank"].isin(victims)]
    return ops.groupby([ops["optype"].astype(str), ops["stage"]])["duration"].median()
