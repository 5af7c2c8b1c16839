"""Score a detector's findings against ground truth, per run, per fault and over a suite.

Pure: takes `RunTruth` records (analysis/ground_truth.py) and findings, no I/O.

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
* Alike: where no op-level trace can tell the victim from another rank
  (`FaultTruth.alike`: a link throttled both ways in a job of two workers), a finding
  naming either end places the fault: it counts as naming the victim, and the other
  end is not a false positive (unless another fault acts on it).
* Over the floor: fault recall and cause again without the faults measured under their
  layout family's clean noise (`FaultTruth.over_floor` < 1: a 15 ms delay that slowed a
  pure DP job 4 %, where clean runs of the family read S up to 5 %), which no detector
  can tell from noise and the whatif detector, by design, does not report
  (`fault_recall_over_floor`; those faults are counted in `faults_below_floor`). The
  faults not measured stay in: nothing says they are under the floor.
* Sensitivity: fault recall by the fault's own measured slowdown (`sensitivity`, bins
  `SENSITIVITY_BINS`); false findings: findings on clean runs per 1,000 clean
  worker-steps (`false_findings_per_1k_clean_worker_steps`).
* Intervals: a seeded bootstrap over cases (analysis/bootstrap.py) beside
  every score, as `ci: {metric: [lo, hi]}`.
* Breakdowns: `by_kind`, `by_family` (pure-dp, pure-pp, dp+pp) and
  `by_kind_family` (`<kind>|<family>`; a run with several kinds counts in each).

    score = score_suite(truths, findings_by_run, online_by_run)
    score.to_json()["f1"], score.to_json()["ci"]["f1"]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from stragglerlab.analysis.bootstrap import CaseBootstrap
from stragglerlab.analysis.ground_truth import CLEAN, FaultTruth, RunTruth
from stragglerlab.findings import Finding, RootCause, same_cause


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


def _names_truth(f: Finding, truth: RunTruth) -> bool:
    reach = truth.ranks.union(*(_reach(x) for x in truth.faults))
    return not f.ranks or any(r.rank in reach for r in f.ranks)


def _names_fault(f: Finding, fault: FaultTruth) -> bool:
    """Names one of the fault's ranks (or one alike) and overlaps its window."""
    ranks = not f.ranks or any(r.rank in _reach(fault) for r in f.ranks)
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
              and (not f.ranks or any(r.rank in _reach(fault) for r in f.ranks))]
        latency = int(min(at) - fault.first_step) if at else None
    error = None
    estimates = [f for f in hits if f.estimated_slowdown]
    if fault.measured_slowdown and estimates:
        best = max(estimates, key=lambda f: f.confidence)
        error = abs(best.estimated_slowdown - fault.measured_slowdown) / fault.measured_slowdown
    return FaultScore(kind=fault.kind, recalled=bool(hits),
                      cause_right=any(same_cause(fault.cause, f.root_cause) for f in hits),
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
    named = _named_ranks(findings, truth.world_size) - apart
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

    causes = {f.cause for f in faults if f.observable} or {truth.cause}
    return RunScore(truth.run, truth.kind, len(named & wanted), len(named - wanted),
                    len(wanted - named), truth.cause, predicted, latency, error,
                    faults=[score_fault(f, findings, online) for f in faults],
                    cause_right=any(same_cause(c, predicted) for c in causes),
                    kinds=truth.kinds, family=truth.family, findings=len(findings),
                    worker_steps=truth.world_size * truth.n_steps)


SENSITIVITY_BINS = (1.0, 1.05, 1.1, 1.2, 1.5, np.inf)
"""Edges of the fault measured-slowdown bins of the sensitivity curve."""


def sensitivity(faults: list[FaultScore]) -> list[dict]:
    """Recall per bin of the faults' own measured slowdown (observable faults); faults
    whose slowdown could not be separated form the last row (`lo` null; `why`: how many
    for each `Unmeasured` reason)."""
    edges = SENSITIVITY_BINS
    measured = [f for f in faults if f.measured_slowdown is not None]
    # a fault measured under 1.0 (host drift) counts in the lowest bin
    at = [max(int(np.searchsorted(edges, f.measured_slowdown, side="right")) - 1, 0)
          for f in measured]
    rows = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        inside = [f for f, b in zip(measured, at) if b == i]
        rows.append({"lo": lo, "hi": None if np.isinf(hi) else hi, "n": len(inside),
                     "recalled": sum(f.recalled for f in inside)})
    unknown = [f for f in faults if f.measured_slowdown is None]
    why: dict[str, int] = {}
    for f in unknown:
        why[f.unmeasured or "unknown"] = why.get(f.unmeasured or "unknown", 0) + 1
    rows.append({"lo": None, "hi": None, "n": len(unknown),
                 "recalled": sum(f.recalled for f in unknown), "why": why})
    for r in rows:
        r["recall"] = r["recalled"] / r["n"] if r["n"] else None
    return rows


def _nan(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _fault_counts(per_case: list[list[FaultScore]]) -> tuple[np.ndarray, ...]:
    """Per case: its faults, those recalled, those with the right cause."""
    return tuple(np.array([sum(map(key, fs)) for fs in per_case], dtype=float)
                 for key in (lambda f: 1, lambda f: f.recalled, lambda f: f.cause_right))


def _share(part: np.ndarray, whole: np.ndarray) -> float | None:
    """part / whole over all cases (None without any)."""
    return float(part.sum() / whole.sum()) if whole.sum() else None


def metrics(runs: list[RunScore], boot: CaseBootstrap | None = None) -> dict:
    """Every score of a set of runs, with bootstrap intervals over them (`ci`)."""
    boot = boot or CaseBootstrap.draw(len(runs))
    tp = np.array([r.true_positives for r in runs], dtype=float)
    fp = np.array([r.false_positives for r in runs], dtype=float)
    fn = np.array([r.false_negatives for r in runs], dtype=float)
    t, p_, n_ = tp.sum(), fp.sum(), fn.sum()
    precision = t / (t + p_) if t + p_ else (1.0 if not n_ else 0.0)
    recall = t / (t + n_) if t + n_ else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    cause = np.array([r.cause_ok for r in runs], dtype=float)
    seen = [[f for f in r.faults if f.observable] for r in runs]  # the rest: apart
    apart = [f for r in runs for f in r.faults if not f.observable]
    n_faults, recalled, fault_cause = _fault_counts(seen)
    # Over the floor: all but the faults measured under their family's clean noise, which
    # a detector that reports nothing under the floor cannot name (module doc).
    n_lifted, lifted_recalled, lifted_cause = _fault_counts(
        [[f for f in fs if not f.below_floor] for fs in seen])
    below = [f for fs in seen for f in fs if f.below_floor]
    clean = [r for r in runs if r.kind == CLEAN]
    clean_steps = sum(r.worker_steps for r in clean)
    latency = _nan([r.latency_steps for r in runs])
    error = _nan([r.slowdown_error for r in runs])
    fault_lat = [f.latency_steps for r in runs for f in r.faults if f.latency_steps is not None]
    fault_err = [f.slowdown_error for r in runs for f in r.faults if f.slowdown_error is not None]
    # Per case: the median of its faults' values (so the bootstrap resamples cases).
    case_lat = _nan([np.median(v) if (v := [f.latency_steps for f in r.faults
                                            if f.latency_steps is not None]) else None
                     for r in runs])
    case_err = _nan([np.median(v) if (v := [f.slowdown_error for f in r.faults
                                            if f.slowdown_error is not None]) else None
                     for r in runs])
    ones = np.ones(len(runs))
    faulty = [r for r in runs if r.kind != CLEAN]
    out = {
        "n_runs": len(runs),
        "precision": precision, "recall": recall, "f1": f1,
        "root_cause_accuracy": float(cause.mean()) if runs else None,
        "median_latency_steps": float(np.nanmedian(latency)) if np.isfinite(latency).any()
        else None,
        "detected_online": f"{int(np.isfinite(latency).sum())}/{len(faulty)}",
        "slowdown_error": float(np.nanmedian(error)) if np.isfinite(error).any() else None,
        "tp": int(t), "fp": int(p_), "fn": int(n_),
        "n_faults": int(n_faults.sum()),
        "fault_recall": _share(recalled, n_faults),
        "fault_cause_accuracy": _share(fault_cause, n_faults),
        "fault_median_latency_steps": float(np.median(fault_lat)) if fault_lat else None,
        "fault_slowdown_error": float(np.median(fault_err)) if fault_err else None,
        "fault_recall_over_floor": _share(lifted_recalled, n_lifted),
        "fault_cause_accuracy_over_floor": _share(lifted_cause, n_lifted),
        "faults_below_floor": len(below),
        "faults_below_floor_recalled": sum(f.recalled for f in below),
        "unobservable_faults": len(apart),
        "unobservable_recalled": sum(f.recalled for f in apart),
        "clean_runs": len(clean),
        "clean_runs_with_findings": sum(r.findings > 0 for r in clean),
        "false_findings_per_1k_clean_worker_steps": (
            1000.0 * sum(r.findings for r in clean) / clean_steps if clean_steps else None),
        "sensitivity": sensitivity([f for fs in seen for f in fs]),
    }
    out["ci"] = {
        "precision": boot.precision_ci(tp, fp, fn),
        "recall": boot.ratio_ci(tp, tp + fn, empty=1.0),
        "f1": boot.f1_ci(tp, fp, fn),
        "root_cause_accuracy": boot.ratio_ci(cause, ones),
        "median_latency_steps": boot.median_ci(latency),
        "slowdown_error": boot.median_ci(error),
        "fault_recall": boot.ratio_ci(recalled, n_faults),
        "fault_cause_accuracy": boot.ratio_ci(fault_cause, n_faults),
        "fault_recall_over_floor": boot.ratio_ci(lifted_recalled, n_lifted),
        "fault_cause_accuracy_over_floor": boot.ratio_ci(lifted_cause, n_lifted),
        "fault_median_latency_steps": boot.median_ci(case_lat),
        "fault_slowdown_error": boot.median_ci(case_err),
    }
    return out


@dataclass
class SuiteScore:
    """A detector's scores over a set of runs."""

    runs: list[RunScore] = field(default_factory=list)
    """Per-run outcomes."""
    resamples: int = 1000
    """Bootstrap resamples of the intervals."""
    seed: int = 0
    """Bootstrap seed."""

    def _metrics(self, runs: list[RunScore]) -> dict:
        return metrics(runs, CaseBootstrap.draw(len(runs), self.resamples, self.seed))

    def to_json(self) -> dict:
        """Suite metrics and intervals, the confusion matrix, breakdowns, per-run rows."""
        out = self._metrics(self.runs)
        confusion = Counter((r.true_cause.value, r.predicted_cause.value) for r in self.runs)
        out["confusion"] = {t: {p: n for (tt, p), n in sorted(confusion.items()) if tt == t}
                            for t in sorted({t for t, _ in confusion})}
        kinds = sorted({r.kind for r in self.runs})
        out["by_kind"] = {k: self._metrics([r for r in self.runs if r.kind == k]) for k in kinds}
        families = sorted({r.family for r in self.runs})
        out["by_family"] = {f: self._metrics([r for r in self.runs if r.family == f])
                            for f in families}
        cells = sorted({(k, r.family) for r in self.runs for k in (r.kinds or [r.kind])})
        out["by_kind_family"] = {
            f"{k}|{fam}": self._metrics([r for r in self.runs if r.family == fam
                                         and k in (r.kinds or [r.kind])])
            for k, fam in cells}
        out["bootstrap"] = {"resamples": self.resamples, "seed": self.seed, "level": 0.95,
                            "over": "cases (runs)"}
        out["runs"] = [r.to_json() for r in self.runs]
        return out


def score_suite(truths: list[RunTruth], findings: dict[str, list[Finding]],
                online: dict[str, list[Finding]] | None = None) -> SuiteScore:
    """Score every scored run of the suite (findings keyed by run folder)."""
    suite = SuiteScore()
    for truth in truths:
        if not truth.scored:
            continue
        suite.runs.append(score_run(truth, findings.get(truth.run, []),
                                    None if online is None else online.get(truth.run)))
    return suite
