"""The rules of the `whatif` detector: one module per rule, one signature.

    def rule(s: Signals, board: Board) -> list[Finding]

A rule reads the evidence (`whatif_signals.Signals`: the what-if metrics and the
signals derived from them, each computed once) and what the rules before it settled
(`Board`), and returns its candidate findings, each carrying the evidence that made
it in `detail`. It never removes or edits another rule's finding, nor filters the
board: overlaps are settled by the precedence table (`whatif_arbitration.PRECEDENCE`),
the one place that says which rule wins, with the exclusions each rule declares.

Each rule module declares, beside its `rule`:

    THRESHOLDS: tuple[Threshold, ...]   # what it compares its statistics with
    EXCLUDES: Exclusion                  # which findings on the board suppress it

A `Threshold` says its name (the `WhatIfDetectorConfig` field, the `--set` key and the
noise floor's statistic), default value, unit, the statistic the noise floor reads for it
and where the value came from; the rule table in docs/detectors.md is rendered from
these declarations (`whatif_table.py`). The thresholds every rule shares are declared
here (`THRESHOLDS`).

Adding a rule: write `whatif_rules/<name>.py` with a `rule` function of this
signature, its `THRESHOLDS` and `EXCLUDES`, then add one line to `PRECEDENCE` saying
where it stands and how its candidates are settled (docs/layout.md, "Adding a rule to
the `whatif` detector").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from stragglerlab.run.findings import Finding, RootCause

STAGE_LIKE = (RootCause.STAGE_IMBALANCE, RootCause.SEQ_IMBALANCE)
"""Causes read off the job's shape (a heavy partition, long sequences): they lengthen
compute from the first step, never a transfer, and an estimated removal moves them."""
LINK_CAUSES = frozenset({RootCause.NET_THROTTLE, RootCause.NET_DELAY})
"""Causes named on a link's end."""
ESTIMATED = frozenset({RootCause.SLOW_WORKER}) | LINK_CAUSES
"""Causes whose removal from the job (the residual pass) is an estimate: their cells'
leftovers are not new faults."""


@dataclass(kw_only=True)
class Board:
    """What the rules run so far have settled (the arbitration writes it, rules read it)."""

    findings: list[Finding] = field(default_factory=list)
    """The findings kept so far."""
    links: list[Finding] = field(default_factory=list)
    """The slow links found (P2P and ring, before they were merged with the findings):
    their windows are what `stage_without_links` leaves out."""
    rose: set[int] = field(default_factory=set)
    """Stages whose own compute rose mid-run (`stage_shift`): slow devices, so no
    heavy-stage finding stands on them."""
    slowed: set[tuple[int, int]] = field(default_factory=set)
    """(dp_rank, stage) of the workers the findings so far name a slow device or GC victim
    (set before the link rules run): their own slowness shows in the links they touch,
    which says nothing of a link."""


@dataclass(frozen=True)
class Exclusion:
    """What suppresses a rule: a failed run, findings on the board of some causes (the
    rule is then not run), and a candidate on a worker a board finding of an excluding
    cause names (dropped). The arbitration applies it (`whatif_arbitration.Entry.
    candidates`); the rule never filters the board itself."""

    named_by: frozenset[RootCause] = frozenset()
    """The causes whose findings' workers the rule leaves to them."""
    failed_run: bool = False
    """A run that did not end ok (a hang, a crash) suppresses the rule: the failure
    findings name what happened to it."""
    board_has: frozenset[RootCause] = frozenset()
    """The rule is not run while the board holds a finding of one of these causes."""

    @classmethod
    def any_cause_but(cls, *kept: RootCause) -> Exclusion:
        """Every finding on the board suppresses the rule, except those of `kept` causes."""
        return cls(frozenset(c for c in RootCause if c not in kept))

    def describe(self) -> str:
        """One line for the rule table."""
        said = ["a failed run"] if self.failed_run else []
        if len(self.board_has) == len(RootCause):
            said.append("any finding")
        elif self.board_has:
            said.append(" or ".join(f"a `{c.value}` finding" for c in sorted(
                self.board_has, key=lambda c: c.value)))
        if len(self.named_by) == len(RootCause):
            said.append("a worker any finding names")
        elif self.named_by:
            but = sorted(c.value for c in RootCause if c not in self.named_by)
            said.append(f"a worker any finding but {', '.join(f'`{c}`' for c in but)} names")
        return "; ".join(said) or "-"


NO_EXCLUSION = Exclusion()
"""No finding on the board suppresses the rule."""


class Unit(str, enum.Enum):
    """What a threshold's value measures (the rule table's unit column)."""

    RATIO = "ratio over its reference"
    """A measure over its reference (a slowdown S, a score over the best's, a compute over
    the peers'): 1 takes the threshold away, under 1 names ranks faster than their
    reference (`whatif_config.RATIOS` holds these to >= 1)."""
    STEP_SHARE = "share of a step"
    JOB_SHARE = "share of job time"
    SHARE = "share"
    CORRELATION = "correlation"
    STEPS = "steps"
    PAIRS = "pairs"
    IQRS = "interquartile ranges"


@dataclass(frozen=True)
class NoiseStatistic:
    """How the noise floor reads a threshold's statistic on clean runs
    (`whatif_noise.py`): the value that takes the threshold away, and the finding detail
    keys the rule writes the statistic under."""

    off: float
    """The value under which the threshold passes everything."""
    keys: tuple[str, ...]
    """Finding detail keys that hold the statistic (the rule's own evidence)."""
    both: bool = False
    """The statistic is the least of the keys (a rule that needs every reading over it)."""


@dataclass(frozen=True, kw_only=True)
class Threshold:
    """One threshold a rule declares: the rule table's row, the noise floor's statistic."""

    name: str
    """Its `WhatIfDetectorConfig` field: the `--set` key, the workflow config's
    `detector_settings` key and the noise floor file's statistic."""
    value: float
    """Its default."""
    unit: Unit
    """What the value measures."""
    what: str
    """One line: what it decides (the rule table's text)."""
    noise: tuple[NoiseStatistic, ...] = ()
    """How the noise floor reads its statistic (the first says how the threshold is taken
    away; every one's readings count); empty: the floor does not hold it."""
    per_step: bool = False
    """Its statistic is a time over the step's, whose clean noise is host jitter in
    seconds per step (`whatif_noise.PER_STEP`)."""
    provenance: str
    """Where the value came from: the paper, or the dev runs that set it (never the test
    split's)."""


THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="straggling_slowdown", value=1.1, unit=Unit.RATIO,
        what=("job slowdown S at which a job straggles (paper)"),
        provenance="""\
        Job slowdown S at which a job straggles (paper §4)."""),
    Threshold(
        name="min_steps", value=3, unit=Unit.STEPS,
        what=("counted steps a straggler (and a link or device window) needs"),
        provenance="""\
        Counted steps a straggler needs (one or two slow steps are noise)."""),
    Threshold(
        name="online_window_steps", value=12, unit=Unit.STEPS,
        what=("steps analysed after each step online"),
        provenance="""\
        Online mode analyses this many latest steps after each step (a sliding window)."""),
)
"""The thresholds every rule shares (and the online window), declared once."""
