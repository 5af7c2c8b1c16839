"""Score a detector's findings against ground truth, per run and per fault.

Pure: takes `RunTruth` records (analysis/ground_truth.py) and findings, no I/O; the
suite's metrics over these per-run scores are stragglerlab.analysis.suite_score's.

* Rank level: over every (run, rank) pair of the suite, a rank a finding names
  (a job-level finding names every rank) is a true positive if the run's
  ground truth names it, else a false positive; a truth rank no finding names
  is a false negative. Clean runs count: any finding there is a false positive.
  Precision, recall and F1 are micro-averaged over the pairs.
* Per fault: every fault record is scored on its own. A fault is *recalled*
  when a finding names one of its ranks (a job-level finding names all) and
  overlaps its step window; its cause is right when such a finding has its
  cause (`same_cause`: net-throttle ~ net-delay, hang ~ crash). Its latency
  (online) counts from its own first step to the first such online finding;
  its slowdown error uses that finding's estimate against the fault's own
  measured slowdown, where the fault can be separated (FaultTruth).
* Root cause (run level, as before): the label of the run's most confident
  finding (`none` without findings), right when it names any of the run's
  fault causes; accuracy over all scored runs, clean ones included, with a
  confusion matrix truth -> predicted.
* Apart: a fault no op-level trace can place (`FaultTruth.observable` false, e.g. a
  delay slept inside the victim's collective in pure DP) is not counted for or against
  a detector: its ranks are neither a miss nor a false positive, and it is reported
  apart (`unobservable_faults`, `unobservable_recalled`).
* Seen job-wide: a slow link every member of its group waits on (pure DP, the one link of
  a pure PP 2 job) leaves no faster peer; a finding of a job-wide cause it may be seen as
  (`FaultTruth.observable_as`: `job-wide-comm`) places it when it names any rank of that
  group (`FaultTruth.shared_by`) or the whole job and overlaps its window, and the group's
  other ranks are not false positives of it (unless another fault acts on them).
* Alike: where no op-level trace can tell the victim from another rank
  (`FaultTruth.alike`: a link throttled both ways in a job of two workers), a finding
  naming either end places the fault: it counts as naming the victim, and the other
  end is not a false positive (unless another fault acts on it).

    run = score_run(truth, findings, online)
    run.true_positives, [f.recalled for f in run.faults]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stragglerlab.analysis.ground_truth import CLEAN, FaultTruth, RunTruth
from stragglerlab.run.findings import JOB_WIDE, Finding, RootCause, same_cause


@dataclass(kw_only=True)
class FaultScore:
    """One fault record's outcome for one detector."""

    kind: str
    """Fault kind."""
    recalled: bool
    """A finding names one of its ranks within its window."""
    cause_right: bool
    """Such a finding has its cause."""
    latency_steps: int | None
    """Online: steps from its first step to the first such finding (None: not measured)."""
    slowdown_error: float | None
    """Relative error of the finding's estimate vs the fault's own measured slowdown."""
    measured_slowdown: float | None = None
    """The fault's own step-time slowdown from the ground truth (None: not separable), so a
    reader can tell a missed fault that slowed the job from one that barely did."""
    observable: bool = True
    """False: no op-level trace can place it; scored apart."""
    over_floor: float | None = None
    """Its measured slowdown over its family's clean noise (FaultTruth.over_floor)."""
    unmeasured: str | None = None
    """Why `measured_slowdown` is None (an `Unmeasured` value; None when measured)."""

    @property
    def below_floor(self) -> bool:
        """Measured, and under its family's clean noise (over_floor < 1)."""
        return self.over_floor is not None and self.over_floor < 1.0

    def to_json(self) -> dict:
        """JSON form."""
        return {"kind": self.kind, "recalled": self.recalled, "cause_right": self.cause_right,
                "latency_steps": self.latency_steps, "slowdown_error": self.slowdown_error,
                "measured_slowdown": self.measured_slowdown, "observable": self.observable,
                "over_floor": self.over_floor, "unmeasured": self.unmeasured}


@dataclass
class RunScore:
    """One run's outcome for one detector."""

    run: str
    """Run folder."""
    kind: str
    """Fault kind or `clean`."""
    true_positives: int
    """Truth ranks the findings name."""
    false_positives: int
    """Named ranks the truth does not hold."""
    false_negatives: int
    """Truth ranks no finding names."""
    true_cause: RootCause
    """Expected root-cause label."""
    predicted_cause: RootCause
    """Label of the most confident finding, `none` without findings."""
    latency_steps: int | None
    """Online detection latency in steps (None: not measured or not detected)."""
    slowdown_error: float | None
    """Relative error of the estimated job slowdown (None when not comparable)."""
    faults: list[FaultScore] = field(default_factory=list)
    """Per fault record."""
    cause_right: bool | None = None
    """The predicted cause names one of the run's causes (None: use true_cause)."""
    kinds: list[str] = field(default_factory=list)
    """Every fault kind of the run (`clean` for none)."""
    family: str = "?"
    """Layout family."""
    findings: int = 0
    """Findings the detector reported on the run."""
    worker_steps: int = 0
    """Traced workers x traced steps."""

    @property
    def cause_ok(self) -> bool:
        """Run-level root cause right."""
        if self.cause_right is not None:
            return self.cause_right
        return same_cause(self.true_cause, self.predicted_cause)

    def to_json(self) -> dict:
        """JSON form (per-run rows of the score file)."""
        return {"run": self.run, "kind": self.kind, "kinds": self.kinds or [self.kind],
                "family": self.family, "tp": self.true_positives,
                "fp": self.false_positives, "fn": self.false_negatives,
                "true_cause": self.true_cause.value,
                "predicted_cause": self.predicted_cause.value, "cause_right": self.cause_ok,
                "latency_steps": self.latency_steps, "slowdown_error": self.slowdown_error,
                "findings": self.findings, "worker_steps": self.worker_steps,
                "faults": [f.to_json() for f in self.faults]}


def _named_ranks(findings: list[Finding], world_size: int) -> set[int]:
    ranks: set[int] = set()
    for f in findings:
        ranks |= {r.rank for r in f.ranks} if f.ranks else set(range(world_size))
    return ranks


def _reach(fault: FaultTruth) -> frozenset[int]:
    """The ranks whose naming places the fault: its own, and those traces cannot tell
    from them (FaultTruth.alike)."""
    return fault.ranks | fault.alike


def _seen_job_wide(f: Finding, fault: FaultTruth) -> bool:
    """A job-wide finding of a cause the fault may be seen as (module docstring)."""
    return f.root_cause in JOB_WIDE and f.root_cause in fault.observable_as


def _fault_reach(f: Finding, fault: FaultTruth) -> frozenset[int]:
    """The ranks whose naming by `f` places the fault: `_reach`, and its whole group for a
    job-wide finding it may be seen as."""
    return _reach(fault) | fault.shared_by if _seen_job_wide(f, fault) else _reach(fault)


def _names_truth(f: Finding, truth: RunTruth) -> bool:
    reach = truth.ranks.union(*(_fault_reach(f, x) for x in truth.faults))
    return not f.ranks or any(r.rank in reach for r in f.ranks)


def _names_fault(f: Finding, fault: FaultTruth) -> bool:
    """Names one of the fault's ranks (or one alike, or one of its group for a job-wide
    finding it may be seen as) and overlaps its window."""
    ranks = not f.ranks or any(r.rank in _fault_reach(f, fault) for r in f.ranks)
    last = np.inf if fault.last_step is None else fault.last_step
    return ranks and f.last_step >= fault.first_step and f.first_step <= last


def _faults_of(truth: RunTruth) -> list[FaultTruth]:
    """The run's fault records; a truth built without them counts as one fault."""
    if truth.faults or truth.kind == CLEAN:
        return list(truth.faults)
    return [FaultTruth(kind=truth.kind, cause=truth.cause, ranks=truth.ranks,
                       first_step=truth.fault_start_step or 0, last_step=None,
                       measured_slowdown=truth.measured_slowdown)]


def score_fault(fault: FaultTruth, findings: list[Finding],
                online: list[Finding] | None) -> FaultScore:
    """One fault record against a run's findings (online ones for its latency)."""
    hits = [f for f in findings if _names_fault(f, fault)]
    latency = None
    if online is not None:
        at = [f.detected_at_step for f in online
              if f.detected_at_step is not None and f.detected_at_step >= fault.first_step
              and (not f.ranks or any(r.rank in _fault_reach(f, fault) for r in f.ranks))]
        latency = int(min(at) - fault.first_step) if at else None
    error = None
    estimates = [f for f in hits if f.estimated_slowdown]
    if fault.measured_slowdown and estimates:
        best = max(estimates, key=lambda f: f.confidence)
        error = abs(best.estimated_slowdown - fault.measured_slowdown) / fault.measured_slowdown
    return FaultScore(kind=fault.kind, recalled=bool(hits),
                      cause_right=any(same_cause(fault.cause, f.root_cause)
                                      or f.root_cause in fault.observable_as for f in hits),
                      latency_steps=latency, slowdown_error=error,
                      measured_slowdown=fault.measured_slowdown,
                      observable=fault.observable, over_floor=fault.over_floor,
                      unmeasured=fault.unmeasured.value if fault.unmeasured else None)


def score_run(truth: RunTruth, findings: list[Finding],
              online: list[Finding] | None = None) -> RunScore:
    """Score one run's offline findings (and online ones, for latency)."""
    faults = _faults_of(truth)
    # Ranks only unobservable faults act on count neither way (module docstring).
    seen = frozenset().union(*[f.ranks for f in faults if f.observable])
    apart = frozenset().union(*[f.ranks for f in faults if not f.observable]) - seen
    # A job-wide finding a fault may be seen as names that fault's ranks for its group's.
    plain = [f for f in findings if not any(_seen_job_wide(f, x) and x.observable
                                             for x in faults)]
    named = _named_ranks(plain, truth.world_size)
    kept = {id(f) for f in plain}
    for f in findings:
        if id(f) in kept:
            continue
        ranks = _named_ranks([f], truth.world_size)
        for x in faults:
            if x.observable and _seen_job_wide(f, x) and ranks & x.shared_by:
                ranks = (ranks - (x.shared_by - truth.ranks)) | x.ranks
        named |= ranks
    named -= apart
    for f in faults:  # an end alike to the victim's places it (module docstring)
        other_end = f.alike - f.ranks - truth.ranks
        if f.observable and other_end and named & f.alike:
            named = (named - other_end) | f.ranks
    wanted = truth.ranks - apart
    top = max(findings, key=lambda f: f.confidence, default=None)
    predicted = top.root_cause if top is not None else RootCause.NONE

    latency = None
    if online is not None and truth.fault_start_step is not None:
        hits = [f.detected_at_step for f in online
                if f.detected_at_step is not None and f.detected_at_step >= truth.fault_start_step
                and _names_truth(f, truth)]
        if hits:
            latency = int(min(hits) - truth.fault_start_step)

    error = None
    estimates = [f for f in findings if _names_truth(f, truth) and f.estimated_slowdown]
    if truth.measured_slowdown and estimates and truth.ranks:
        best = max(estimates, key=lambda f: f.confidence)
        error = abs(best.estimated_slowdown - truth.measured_slowdown) / truth.measured_slowdown

    causes = {c for f in faults if f.observable for c in f.seen_as} or {truth.cause}
    return RunScore(truth.run, truth.kind, len(named & wanted), len(named - wanted),
                    len(wanted - named), truth.cause, predicted, latency, error,
                    faults=[score_fault(f, findings, online) for f in faults],
                    cause_right=any(same_cause(c, predicted) for c in causes),
                    kinds=truth.kinds, family=truth.family, findings=len(findings),
                    worker_steps=truth.world_size * truth.n_steps)
