"""A detector's scores over a suite of runs: micro-averaged precision, recall and F1,
root-cause accuracy, per-fault recall and cause, with bootstrap intervals and breakdowns.

Pure: aggregates the per-run scores of stragglerlab.analysis.scoring, no I/O.

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
from stragglerlab.analysis.ground_truth import CLEAN, RunTruth
from stragglerlab.analysis.scoring import FaultScore, RunScore, score_run
from stragglerlab.run.findings import Finding

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
