"""The `whatif` detector: the paper's diagnosis (OSDI'25 §4-5), made automatic.

Offline it reads the run's what-if result, `<run>/whatif/whatif.json`, as
`stragglerlab whatif` wrote it (the mean ideal's metrics, per-step S_dp /
S_stage and the comm excess per worker): the analysis is computed once per
run, by the whatif step, never again here. Without that file it stops with an
InputError saying to run `stragglerlab whatif` first. From it and the trace it
reads, in this order (one pipeline: the evidence is `whatif_signals.Signals`, each rule
one module of `whatif_rules/`, and `whatif_arbitration.PRECEDENCE` the table that runs
them in this order and settles their overlaps):

1. a failed run (hang, crash): the rank the runtime saw stop (run.json's
   error, else the rank whose progress stopped first) -> `crash` when its
   process died, else `hang`;
2. GC: measured pauses outside the planned `gc` op (`gc_pause_s`) take at
   least `gc_min_share` of the job's time -> `gc-pauses` on the ranks that pause;
3. sequence imbalance: long microbatches are slow and not because of one
   worker (M_W < 0.5): forward and backward durations of the same microbatch
   correlate (within-worker-step residuals, >= `seq_correlation`; the job must
   straggle, S >= 1.1) or a microbatch's compute time follows its
   sum(seq_len^2) (the trace's `seq_len_sq_sum`; residuals within (stage,
   step), >= `seq_len_correlation`; S >= `seq_min_slowdown`, 1.03; with one DP
   rank M_W is not read, and when the top worker explains most (M_W >= 0.5, a slow
   device beside the lengths) the slowdown left once it is explained and removed,
   1 + (S - 1)(1 - M_W), must still reach 1.03) -> `seq-imbalance` for the whole job;
4. stage imbalance: the job straggles (S >= 1.1), one stage's S_stage is
   `worker_threshold` over the lightest's, its DP ranks straggle alike and computation carries the
   slowdown -> `stage-imbalance` on that stage (`whatif_stage.py`);
5. stragglers by worker score: per step, each worker's min(S_dp, S_stage)
   over the step's best worker's (a busy host lifts every worker, a
   straggler lifts one). A worker is a straggler when, from its first to its
   last step above `step_threshold` (at least `min_steps` of them), its mean
   ratio is at least `worker_threshold`; that window is the finding's steps.
   The stragglers are then named:
   * a straggler whose own compute time is `compute_ratio` over its stage
     peers' -> `slow-worker` (a slow device); stage peers that straggle much less
     than the stage's worst only share its collectives and are not named;
   * every DP rank of a stage straggling, computation carrying the slowdown
     -> `stage-imbalance` on that stage;
   * any other straggler waits on communication -> `net-throttle` (a slow link), on the rank
     whose comm ops collect the most transfer time over their op type's
     median (a slow link is in every slow group; a peer in only some);
6. no straggler by step, but the job straggles and M_W >= `mw_worker` (the
   paper's worker issue), with DP peers -> `slow-worker` on the top workers
   whose own compute is `compute_ratio` over their peers';
7. no straggler, but one rank's comm ops collect `link_over_median` times
   the median worker's excess and `link_share` of the job's time, its own
   compute not slow -> `net-throttle` on that rank (a mild slow link that slows
   every rank it talks to about equally).

Beside all of these, a worker whose own compute, per unit of modelled work (sum(s^2)
where lengths vary) and without its GC pauses, holds `device_compute_ratio` over
the median of its stage's other DP ranks -> `slow-worker` on it: a slow device is a
fault whether or not 1F1B's slack or another fault keeps it off the critical path
(`whatif_device.py`); and where a device has no unslowed DP peer (pure PP, or a whole stage
slowed), a stage whose own compute rose mid-run by `device_compute_ratio`, over its
earlier or later steps and over the other stages' -> `slow-worker` on its DP ranks (a
heavy stage is heavy from the first step; `whatif_shift.py`). And (a slow link is often
one fault of several, and a mild one does not make the job straggle): a P2P sender
nearly all of whose pairs are slower than the other senders' in its place, or a worker
nearly all of the pairs it sends or
receives are (a link throttled both ways), by enough to cost `link_step_share` of a
step -> `net-throttle` on it, unless another finding named it (`whatif_links.py`);
in every stage's DP group of 3 or more ranks, the rank whose ring neighbours leave the
reduce-scatter and the all-gather late and early in the pattern a throttled ring link
leaves, by `ring_step_share` of a step -> `net-throttle` on it (`whatif_ring.py`;
with stages it also says which end of a slow pipeline link is throttled).
A throttled link's transfers enter the ideal and can hide a heavy stage: when links
are found and no stage was named, the steps outside their windows are re-analysed
for one (explain one straggler, remove it, re-analyse; `whatif_stage.py`). And when no
finding names a stage or sequence imbalance, a stage whose forward and backward ops take
`stage_compute_ratio` over the other stages' on every DP rank in nearly every step is
named: a link, a slow worker or GC can carry the job's S, but none lengthens the
partition's compute ops (`whatif_stage.stage_by_compute`).

Then the residual pass (`whatif_residual.py`): the faults found are removed from the job,
the job is simulated without them (every other op as traced) and the same rules
diagnose that residual job; what it names on a cell nothing explained yet is a fault of
its own (a fault beside a larger one hides behind it in the first pass). Offline only:
online windows keep one analysis per step.

Every threshold above stands over the noise measured on clean runs of the run's layout
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
        self._seen.append(step_trace)
        del self._seen[:-self.online_window_steps]
        seen = Run(pd.concat(self._seen, ignore_index=True), self._meta, run.path,
                   testbed=run.testbed)
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
                    run.meta, run.path, testbed=run.testbed)
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
