"""The scores file of `stragglerlab score`, read and checked for the report and the figures.

`scores.json` is `{"schema": "stragglerlab.scores/1", detector: {f1, precision,
recall, root_cause_accuracy, ..., ci: {metric: [lo, hi]}, confusion: {true:
{predicted: n}}, by_kind, by_family, by_kind_family: {"<kind>|<family>": {...}},
runs: [...]}}` (analysis/suite_score.py); a file without `schema` is an older /1 file.
`parse_scores` turns it into typed `DetectorScore`s, and any file that is not
that shape (a metric that is not a number, an interval that is not [lo, hi],
a negative confusion count, ...) is ONE InputError naming the file and field.
Older files without intervals or breakdowns still load (those parts are empty).

    from stragglerlab.figures.scores import read_scores
    board = read_scores(Path("results/scores.json"))          # ScoreFile
    for d in board.ranked():                                    # by F1, best first
        print(d.name, d.overall.get("f1").cell(), d.confusion)
    heads = confusion_matrices(board)       # one Matrix per detector, shared label order

This module is a library; `stragglerlab report` and `stragglerlab figures` use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.run.findings import RootCause, same_cause
from stragglerlab.util.filecheck import Checker, load_json

SCORES_SCHEMA = "stragglerlab.scores/1"
"""The `schema` value of scores.json (beside the detectors' entries)."""
SCORES_FIX = "rewrite it with `stragglerlab score --out DIR`"
"""How to repair a bad scores file (in every error message)."""
MAX_SCORES_BYTES = 16 * 1024 * 1024
"""Largest scores JSON read (per-run rows of every detector included)."""
RATIOS = ("precision", "recall", "f1", "root_cause_accuracy", "fault_recall",
          "fault_cause_accuracy")
"""Metrics that are shares, in [0, 1]."""
NON_NEGATIVE = ("median_latency_steps", "slowdown_error", "fault_median_latency_steps",
                "fault_slowdown_error")
"""Metrics that are >= 0 (steps, relative errors)."""
COUNTS = ("n_runs", "tp", "fp", "fn", "n_faults")
"""Integer counts."""
BREAKDOWNS = ("by_kind", "by_family", "by_kind_family")
"""Per-slice tables of a detector's scores."""


@dataclass(frozen=True)
class Estimate:
    """One score and its bootstrap interval (None where not measured)."""

    value: float | None
    """The score over every case."""
    lo: float | None = None
    """Lower end of the 95% interval over cases."""
    hi: float | None = None
    """Upper end."""

    def cell(self, digits: int = 3) -> str:
        """`value [lo, hi]`, `value` without an interval, `-` without a value."""
        if self.value is None:
            return "-"
        text = fmt(self.value, digits)
        if self.lo is None or self.hi is None:
            return text
        return f"{text} [{fmt(self.lo, digits)}, {fmt(self.hi, digits)}]"


def fmt(value: float | int | None, digits: int = 3) -> str:
    """A number in `digits` significant digits (`-` for None)."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


@dataclass
class Slice:
    """Scores over a set of runs (the whole suite, one kind, one kind x family cell)."""

    metrics: dict[str, float | None] = field(default_factory=dict)
    """Numeric scores by key (precision, f1, ...)."""
    ci: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    """Bootstrap interval per metric."""
    n_runs: int | None = None
    """Runs in the slice."""

    def get(self, metric: str) -> Estimate:
        """A metric with its interval."""
        ci = self.ci.get(metric)
        return Estimate(self.metrics.get(metric), *(ci if ci else (None, None)))

    def first(self, *metrics: str) -> Estimate:
        """The first of `metrics` the file holds (newer keys first, legacy ones after)."""
        for m in metrics:
            if m in self.metrics:
                return self.get(m)
        return Estimate(None)


@dataclass(frozen=True)
class SensitivityBin:
    """Faults whose measured slowdown fell in [lo, hi), and how many a detector recalled."""

    lo: float | None
    """Lower edge (None: the faults whose slowdown could not be separated)."""
    hi: float | None
    """Upper edge (None: open)."""
    n: int
    """Faults in the bin."""
    recalled: int
    """Of them, recalled."""

    @property
    def label(self) -> str:
        """`<1.05`, `1.05-1.1`, `>=1.5` or `unmeasured`."""
        if self.lo is None:
            return "unmeasured"
        if self.hi is None:
            return f">={self.lo:g}"
        return f"<{self.hi:g}" if self.lo <= 1.0 else f"{self.lo:g}-{self.hi:g}"


@dataclass
class DetectorScore:
    """One detector's row of the scores file."""

    name: str
    """Detector name."""
    overall: Slice
    """Scores over every scored run."""
    by_kind: dict[str, Slice] = field(default_factory=dict)
    """Per fault kind (`clean` for runs without a fault)."""
    by_kind_family: dict[tuple[str, str], Slice] = field(default_factory=dict)
    """Per (fault kind, layout family)."""
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    """Runs per true root cause -> predicted cause (most confident finding)."""
    sensitivity: list[SensitivityBin] = field(default_factory=list)
    """Fault recall by the faults' measured slowdown (empty in older score files)."""

    def sort_key(self) -> tuple:
        """F1 descending, then cause accuracy descending, then name (None last)."""
        f1 = self.overall.metrics.get("f1")
        cause = self.overall.metrics.get("root_cause_accuracy")
        return (-(f1 if f1 is not None else -1.0), -(cause if cause is not None else -1.0),
                self.name)


@dataclass
class ScoreFile:
    """Every detector of one scores file."""

    path: str
    """Where it was read from."""
    detectors: list[DetectorScore]
    """In file order."""

    def ranked(self) -> list[DetectorScore]:
        """The leaderboard order: by F1, best first (ties: cause accuracy, then name)."""
        return sorted(self.detectors, key=DetectorScore.sort_key)

    def families(self) -> list[str]:
        """Layout families present in any kind x family cell (pure-dp, pure-pp, dp+pp first)."""
        seen = {fam for d in self.detectors for _, fam in d.by_kind_family}
        order = ["pure-dp", "pure-pp", "dp+pp"]
        return [f for f in order if f in seen] + sorted(seen - set(order))


def _slice(chk: Checker, raw: object, where: str) -> Slice:
    raw = chk.mapping(raw, where)
    out = Slice()
    for key, v in raw.items():
        key = str(key)
        name = f"{where}.{key[:40]}"
        if key in RATIOS:
            out.metrics[key] = chk.number(v, name, minimum=0.0, maximum=1.0, optional=True)
        elif key in NON_NEGATIVE:
            out.metrics[key] = chk.number(v, name, minimum=0.0, optional=True)
        elif key in COUNTS:
            value = chk.integer(v, name, minimum=0, optional=True)
            out.metrics[key] = value
            if key == "n_runs":
                out.n_runs = value
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.metrics[key] = chk.number(v, name)
    for key, v in chk.mapping(raw.get("ci") or {}, f"{where}.ci").items():
        name = f"{where}.ci.{str(key)[:40]}"
        if v is None:
            out.ci[str(key)] = None
            continue
        pair = chk.listing(v, name)
        if len(pair) != 2:
            chk.fail(name, f"expected [lo, hi], got {len(pair)} values")
        lo, hi = (chk.number(x, f"{name}[{i}]") for i, x in enumerate(pair))
        if lo > hi:
            chk.fail(name, f"interval [{lo}, {hi}] has lo > hi")
        out.ci[str(key)] = (lo, hi)
    return out


def _confusion(chk: Checker, raw: object, where: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for true, row in chk.mapping(raw, where).items():
        name = f"{where}.{str(true)[:40]}"
        out[str(true)] = {str(p): chk.integer(n, f"{name}.{str(p)[:40]}", minimum=0)
                          for p, n in chk.mapping(row, name).items()}
    return out


def _detector(chk: Checker, name: str, raw: object) -> DetectorScore:
    where = name[:40]
    raw = chk.mapping(raw, where)
    score = DetectorScore(name=name, overall=_slice(chk, raw, where))
    for key in BREAKDOWNS:
        chk.mapping(raw.get(key) or {}, f"{where}.{key}")
    for kind, s in (raw.get("by_kind") or {}).items():
        score.by_kind[str(kind)] = _slice(chk, s, f"{where}.by_kind.{str(kind)[:40]}")
    for fam, s in (raw.get("by_family") or {}).items():
        _slice(chk, s, f"{where}.by_family.{str(fam)[:40]}")
    for cell, s in (raw.get("by_kind_family") or {}).items():
        label = f"{where}.by_kind_family.{str(cell)[:40]}"
        kind, sep, fam = str(cell).rpartition("|")
        if not sep or not kind or not fam:
            chk.fail(label, "expected a '<kind>|<family>' key, e.g. 'slow-worker|pure-dp'")
        score.by_kind_family[(kind, fam)] = _slice(chk, s, label)
    if raw.get("confusion") is not None:
        score.confusion = _confusion(chk, raw["confusion"], f"{where}.confusion")
    for i, row in enumerate(chk.listing(raw.get("sensitivity") or [], f"{where}.sensitivity")):
        name = f"{where}.sensitivity[{i}]"
        row = chk.mapping(row, name)
        n = chk.integer(row.get("n"), f"{name}.n", minimum=0)
        score.sensitivity.append(SensitivityBin(
            lo=chk.number(row.get("lo"), f"{name}.lo", optional=True),
            hi=chk.number(row.get("hi"), f"{name}.hi", optional=True), n=n,
            recalled=chk.integer(row.get("recalled"), f"{name}.recalled", 0, n)))
    chk.listing(raw.get("runs") or [], f"{where}.runs")
    return score


def parse_scores(raw: object, path: str | Path) -> ScoreFile:
    """The checked scores of a parsed scores JSON (one InputError naming path when bad)."""
    chk = Checker(path, SCORES_FIX)
    raw = chk.mapping(raw, "scores")
    if "schema" in raw:  # older files have none
        chk.schema(raw["schema"], SCORES_SCHEMA, "scores")
    return ScoreFile(path=str(path),
                     detectors=[_detector(chk, str(name), s) for name, s in raw.items()
                                if name != "schema"])


def read_scores(path: str | Path) -> ScoreFile:
    """Read and check a scores file (missing, not UTF-8, not JSON, bad shape: InputError)."""
    raw = load_json(path, "scores JSON", SCORES_FIX, max_bytes=MAX_SCORES_BYTES)
    return parse_scores(raw, path)


@dataclass(frozen=True)
class Matrix:
    """One detector's confusion matrix over a shared, ordered label set."""

    detector: str
    """Detector name."""
    labels: list[str]
    """Cause labels of both axes, in order."""
    counts: list[list[int]]
    """counts[true][predicted]: runs."""

    @property
    def runs(self) -> int:
        """Runs in the matrix."""
        return sum(map(sum, self.counts))

    def right(self) -> int:
        """Runs whose predicted cause counts as right (same_cause: net-throttle ~ net-delay,
        hang ~ crash)."""
        return sum(n for i, row in enumerate(self.counts) for j, n in enumerate(row)
                   if _same(self.labels[i], self.labels[j]))

    def worst_confusion(self) -> tuple[str, str, int] | None:
        """The largest wrong cell (true, predicted, runs), None when every run is right."""
        wrong = [(n, self.labels[i], self.labels[j]) for i, row in enumerate(self.counts)
                 for j, n in enumerate(row) if n and not _same(self.labels[i], self.labels[j])]
        if not wrong:
            return None
        n, true, predicted = max(wrong, key=lambda w: (w[0], w[1], w[2]))
        return true, predicted, n


def _same(true: str, predicted: str) -> bool:
    try:
        return same_cause(RootCause(true), RootCause(predicted))
    except ValueError:  # a label outside the vocabulary: right only when spelled the same
        return true == predicted


def cause_labels(detectors: list[DetectorScore]) -> list[str]:
    """Every label of the matrices: the root-cause vocabulary's order, others, `none` last."""
    seen = {x for d in detectors for t, row in d.confusion.items() for x in (t, *row)}
    vocab = list(dict.fromkeys(c.value for c in RootCause if c is not RootCause.NONE))
    ordered = [c for c in vocab if c in seen]
    ordered += sorted(seen - set(ordered) - {RootCause.NONE.value})
    return ordered + ([RootCause.NONE.value] if RootCause.NONE.value in seen else [])


def confusion_matrices(scores: ScoreFile) -> list[Matrix]:
    """The confusion matrix of every detector that has one, in leaderboard order."""
    ranked = [d for d in scores.ranked() if d.confusion]
    labels = cause_labels(ranked)
    return [Matrix(d.name, labels, [[d.confusion.get(t, {}).get(p, 0) for p in labels]
                                    for t in labels]) for d in ranked]
