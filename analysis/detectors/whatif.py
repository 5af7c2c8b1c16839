"""The `whatif` detector: the paper's diagnosis (OSDI'25 §4-5), made automatic.

Offline it reads the run's what-if result, `<run>/whatif/whatif.json`, as
`stragglerlab whatif` wrote it (the mean ideal's metrics, per-step S_dp /
S_stage and the comm excess per worker): the analysis is computed once per
run, by the whatif step, never again here. Without that file it stops with an
InputError saying to run `stragglerlab whatif` first. From it and the trace it
reads the evidence (`whatif_signals.Signals`: the what-if metrics and every signal derived
from them, each computed once) and runs the rules, one module each in `whatif_rules/`, in
the order of the precedence table (`whatif_arbitration.PRECEDENCE`), which settles their
overlaps with each rule's declared exclusions. What each rule names, and on what
evidence, is its module's docstring; its thresholds are its `THRESHOLDS` (value, unit,
noise statistic, provenance). docs/detectors.md's rule table is rendered from both
(`whatif_table.py`). Before the rules, a failed run (hang, crash) is named on the rank the
runtime saw stop (`whatif_failure.failure_findings`).

Then the residual pass (`whatif_residual.py`): the faults found are removed from the job,
the job is simulated without them (every other op as traced) and the same rules
diagnose that residual job; what it names on a cell nothing explained yet is a fault of
its own (a fault beside a larger one hides behind it in the first pass). Offline only:
online windows keep one analysis per step.

Every threshold stands over the noise measured on clean runs of the run's layout
family: where the noise floor (config/noise-floor.yaml, `whatif_noise.py`) reaches a
threshold, it is raised just above it, and what the configured thresholds alone would
have named is reported under the floor and not counted (`noise_report`).

Online (`stragglerlab detect --online`) it re-analyses the latest
`online_window_steps` steps after every step, so the cost per step stays flat
however long the run. This is the one place the analysis is recomputed, and
only online: an online detector may see only the steps so far, while every
number in whatif.json is taken against the whole run's ideal (each op type's
mean over all steps, future ones included) and M_W / top workers need a fresh
simulation of the window.

    stragglerlab whatif --run results/slow-worker-1/0
    stragglerlab detect --run results/slow-worker-1/0 --detector whatif \
        --out results/slow-worker-1/0/detect
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Detector, Finding, Run, TraceNeed
from stragglerlab.analysis.detectors.signatures import mean_step_time
from stragglerlab.analysis.detectors.whatif_arbitration import (
    PRECEDENCE,
    across_ranks,
    arbitrate,
    rules_config,
)
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_evidence import Evidence, read_evidence
from stragglerlab.analysis.detectors.whatif_failure import failure_findings
from stragglerlab.analysis.detectors.whatif_noise import (
    CleanReading,
    clean_reading,
    floored_config,
)
from stragglerlab.analysis.detectors.whatif_residual import residual_findings
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.general_findings import import_findings
from stragglerlab.method.noise_floor import NoiseFloor, noise_floor_option
from stragglerlab.run.results import WhatIfResult
from stragglerlab.util.errors import InputError

__all__ = ["PRECEDENCE", "Evidence", "WhatIfDetector", "WhatIfDetectorConfig", "read_evidence"]


def _key(f: Finding) -> tuple:
    """A finding's identity across two diagnoses: cause and ranks."""
    return f.root_cause, tuple(sorted(f.ranks))


class WhatIfDetector(Detector):
    """Straggler diagnosis from the what-if analysis (worker, stage, sequence, GC, network)."""

    name = "whatif"
    description = "what-if analysis: worker/stage scores, fwd-bwd correlation, GC and network"
    needs = TraceNeed.WHATIF
    reads_whatif = True
    """Offline it reads <run>/whatif/whatif.json (the workflow's detect job depends on it)."""

    def __init__(self, config: WhatIfDetectorConfig | None = None,
                 noise_floor: NoiseFloor | None | str = "default") -> None:
        """noise_floor: the measured floor thresholds are raised to (`whatif_noise.py`);
        "default" reads the shipped config/noise-floor.yaml, which was measured on this
        testbed and so applies to its runs only (run.json), None uses none."""
        self.config = rules_config(config)
        self.noise_floor = (noise_floor_option(None) if noise_floor == "default"
                            else noise_floor)
        self.shipped_floor = noise_floor == "default"
        # Online: a sliding window keeps the cost per step flat however long the run.
        self.online_window_steps = self.config.online_window_steps
        self.noise_report: dict | None = None
        """After `detect`: the run's family floor, the thresholds it raised and the
        findings that stayed under it (reported, not counted)."""

    def use_noise_floor(self, option: str) -> None:
        """Hold the thresholds to the floor a `--noise-floor` flag names: a file, `default`
        (the shipped one, this testbed's runs only) or `none` (InputError for a bad file)."""
        if option != "default":
            self.noise_floor, self.shipped_floor = noise_floor_option(option), False

    def detect_online(self, run: Run) -> list[Finding]:
        """Step-by-step replay; a failed run's lost rank is reported when it stops."""
        if self.online_window_steps < self.config.min_steps:
            # Every window would hold fewer steps than a finding needs: silently nothing.
            raise InputError(
                f"online_window_steps={self.online_window_steps} is under min_steps="
                f"{self.config.min_steps}: each online window must hold the steps a "
                "finding needs, or online mode never names one; raise online_window_steps "
                "or lower min_steps (--set NAME=VALUE)")
        self.noise_report = self._floored(run, self.online_window_steps)[1]
        return super().detect_online(run) + failure_findings(run)

    def observe_step(self, step_trace: pd.DataFrame, run: Run) -> list[Finding]:
        """Online: re-analyse the latest `online_window_steps` steps (only the steps so far)."""
        if not self._seen:
            self._first_step = int(step_trace["step"].iloc[0])  # the run's first step
        self._seen.append(step_trace)
        del self._seen[:-self.online_window_steps]
        seen = Run(pd.concat(self._seen, ignore_index=True), self._meta, run.path,
                   testbed=run.testbed, first_step=self._first_step)
        if seen.trace["step"].nunique() < self.config.min_steps:
            return []
        return self.diagnose(seen, Evidence.analyse(seen), window_steps=self.online_window_steps)

    # -- offline -----------------------------------------------------------------------
    def detect(self, run: Run, result: WhatIfResult | None = None) -> list[Finding]:
        """Findings of the whole run, from its whatif/whatif.json (or the what-if `result`
        the caller already has) and its trace."""
        if not run.vocabulary:  # an unannotated import: what its what-if names
            return import_findings(run.path)
        findings = failure_findings(run)
        rules, self.noise_report = self._floored(run)
        if run.trace.empty or run.trace["step"].nunique() < self.config.min_steps:
            return findings
        evidence = read_evidence(run) if result is None else Evidence.from_result(result)
        self.noise_report["job_slowdown"] = float(evidence.view.slowdown)
        found = rules._diagnose(run, evidence)
        if rules is not self:  # what the configured thresholds alone would have named
            kept = {_key(f) for f in found}
            self.noise_report["below_floor"] = [
                f.to_dict() for f in self._diagnose(run, evidence) if _key(f) not in kept]
        return findings + found

    def diagnose(self, run: Run, evidence: Evidence,
                  window_steps: int | None = None) -> list[Finding]:
        """Straggler findings from the what-if evidence and the run's trace (not failures),
        under thresholds raised to the run's layout family's noise floor (the online
        floor of `window_steps`-step windows when the run is such a window). A window
        (online, the monitor) gets no residual pass: its cost per step stays one analysis."""
        return self._floored(run, window_steps)[0]._diagnose(
            run, evidence, residual=window_steps is None)

    def clean_reading(self, run: Run) -> CleanReading:
        """A clean run's reading for the noise floor (`whatif_noise.py`): over the whole
        run, and over every sliding window the online mode diagnoses."""
        whole = Signals(run=run, evidence=read_evidence(run), config=self.config)
        # Every signal is computed once per window (windows of both lengths share theirs)
        # and reused under each relaxed config: none depends on a threshold.
        analysed: dict[tuple, tuple[Signals, float]] = {}

        def over_windows(cfg: WhatIfDetectorConfig, length: int
                         ) -> list[tuple[list[Finding], float]]:
            out = []
            for w in self._windows(run, length):
                key = tuple(np.unique(w.trace["step"]))
                if key not in analysed:
                    analysed[key] = (Signals(run=w, evidence=Evidence.analyse(w), config=cfg),
                                     mean_step_time(w.trace))
                signals, step_s = analysed[key]
                out.append((arbitrate(signals.with_config(cfg)), step_s))
            return out

        step_s = mean_step_time(run.trace)
        return clean_reading(run, whole.evidence, self.config,
                             lambda cfg: [(arbitrate(whole.with_config(cfg)), step_s)],
                             over_windows)

    def _windows(self, run: Run, w: int) -> list[Run]:
        """The window runs an online replay with `w`-step windows diagnoses on `run`."""
        steps = np.sort(run.trace["step"].unique())
        return [Run(run.trace[run.trace["step"].isin(steps[max(0, i - w + 1):i + 1])],
                    run.meta, run.path, testbed=run.testbed, first_step=int(steps[0]))
                for i in range(self.config.min_steps - 1, len(steps))]

    def _floored(self, run: Run, window_steps: int | None = None
                 ) -> tuple[WhatIfDetector, dict]:
        """The detector whose thresholds stand above the run's family floor, and the
        report of that floor."""
        floor = None if self.shipped_floor and not run.testbed else self.noise_floor
        step_s = mean_step_time(run.trace) if floor is not None and not run.trace.empty \
            else None
        cfg, report = floored_config(self.config, floor, run.meta, window_steps, step_s)
        return (WhatIfDetector(cfg, noise_floor=None) if report["raised"] else self), report

    def _diagnose(self, run: Run, evidence: Evidence, residual: bool = True) -> list[Finding]:
        """The rules under this detector's own thresholds, settled by the precedence table,
        then the residual pass: what they name is removed, the job simulated without it and
        diagnosed again (`whatif_residual.py`)."""
        found = arbitrate(Signals(run=run, evidence=evidence, config=self.config))
        if not residual:
            return found
        return found + residual_findings(run, found, self._rules_on_fresh_analysis)

    def _rules_on_fresh_analysis(self, run: Run) -> list[Finding]:
        """The rules across ranks alone on a fresh what-if of `run` (a residual job has no
        whatif.json; its step times change where a removed fault began, `across_ranks`)."""
        return arbitrate(Signals(run=run, evidence=Evidence.analyse(run), config=self.config),
                         across_ranks())
