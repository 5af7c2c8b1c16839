"""Score a detector's findings against ground truth, per run and over a suite.

Pure: takes `RunTruth` records (analysis/ground_truth.py) and findings, no I/O.

* Rank level: over every (run, rank) pair of the suite, a rank a finding names
  (a job-level finding names every rank) is a true positive if the run's
  ground truth names it, else a false positive; a truth rank no finding names
  is a false negative. Clean runs count: any finding there is a false positive.
  Precision, recall and F1 are micro-averaged over the pairs.
* Root cause: the run's predicted label is the label of its most confident
  finding (`none` without findings); labels are fault kinds (one vocabulary,
  stragglerlab.findings), a prediction is right when it names the true kind
  or one no trace tells apart from it (`same_cause`: net-throttle ~ net-delay,
  hang ~ crash);
  accuracy over all scored runs, clean ones included, with a confusion matrix
  truth -> predicted.
* Latency (online mode): steps from the fault's first traced step to the first
  finding that names a truth rank, reported at or after that step; 0 = caught
  in the first faulty step.
* Slowdown error: |estimated - measured| / measured, using the most confident
  true-positive finding's estimate, where both are known.

    score = score_suite(truths, findings_by_run, online_by_run)
    score.to_json()["f1"]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from stragglerlab.analysis.ground_truth import RunTruth
from stragglerlab.findings import Finding, RootCause, same_cause


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

    def to_json(self) -> dict:
        """JSON form (per-run rows of the score file)."""
        return {"run": self.run, "kind": self.kind, "tp": self.true_positives,
                "fp": self.false_positives, "fn": self.false_negatives,
                "true_cause": self.true_cause.value,
                "predicted_cause": self.predicted_cause.value,
                "latency_steps": self.latency_steps, "slowdown_error": self.slowdown_error}


def _named_ranks(findings: list[Finding], world_size: int) -> set[int]:
    ranks: set[int] = set()
    for f in findings:
        ranks |= {r.rank for r in f.ranks} if f.ranks else set(range(world_size))
    return ranks


def _names_truth(f: Finding, truth: RunTruth) -> bool:
    return not f.ranks or any(r.rank in truth.ranks for r in f.ranks)


def score_run(truth: RunTruth, findings: list[Finding],
              online: list[Finding] | None = None) -> RunScore:
    """Score one run's offline findings (and online ones, for latency)."""
    named = _named_ranks(findings, truth.world_size)
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

    return RunScore(truth.run, truth.kind, len(named & truth.ranks), len(named - truth.ranks),
                    len(truth.ranks - named), truth.cause, predicted, latency, error)


@dataclass
class SuiteScore:
    """A detector's scores over a set of runs."""

    runs: list[RunScore] = field(default_factory=list)
    """Per-run outcomes."""

    def _metrics(self, runs: list[RunScore]) -> dict:
        tp = sum(r.true_positives for r in runs)
        fp = sum(r.false_positives for r in runs)
        fn = sum(r.false_negatives for r in runs)
        precision = tp / (tp + fp) if tp + fp else (1.0 if not fn else 0.0)
        recall = tp / (tp + fn) if tp + fn else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        latencies = [r.latency_steps for r in runs if r.latency_steps is not None]
        errors = [r.slowdown_error for r in runs if r.slowdown_error is not None]
        faulty_online = [r for r in runs if r.kind != "clean"]
        return {
            "n_runs": len(runs),
            "precision": precision, "recall": recall, "f1": f1,
            "root_cause_accuracy": (float(np.mean([same_cause(r.true_cause, r.predicted_cause)
                                                   for r in runs])) if runs else None),
            "median_latency_steps": float(np.median(latencies)) if latencies else None,
            "detected_online": f"{len(latencies)}/{len(faulty_online)}",
            "slowdown_error": float(np.median(errors)) if errors else None,
            "tp": tp, "fp": fp, "fn": fn,
        }

    def to_json(self) -> dict:
        """Suite metrics, the confusion matrix, per-kind breakdown and per-run rows."""
        out = self._metrics(self.runs)
        confusion = Counter((r.true_cause.value, r.predicted_cause.value) for r in self.runs)
        out["confusion"] = {t: {p: n for (tt, p), n in sorted(confusion.items()) if tt == t}
                            for t in sorted({t for t, _ in confusion})}
        kinds = sorted({r.kind for r in self.runs})
        out["by_kind"] = {k: self._metrics([r for r in self.runs if r.kind == k]) for k in kinds}
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
