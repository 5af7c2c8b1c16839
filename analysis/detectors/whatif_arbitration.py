"""Arbitration of the `whatif` detector: the precedence table, and how it settles overlaps.

The rules (`whatif_rules/`, one module each) propose candidate findings; this module
runs them in the order of `PRECEDENCE` and settles each one's candidates against the
board: first by the rule's declared exclusions (`EXCLUDES`, `whatif_rules.Exclusion`: the
rule is not run on a failed run or while the board holds a finding of some causes, and a
candidate on a worker a board finding of an excluding cause names is dropped), then by
its `Settle` mode. It is the one place that says which finding wins:

* `ADD`: added.
* `FIRST_MATCH`: of a run of consecutive `FIRST_MATCH` rules the first with candidates
  wins and the rest are not run (the method's order of causes); a candidate that
  names only workers a `gc-pauses` finding names is GC seen again, and is dropped.
* `STAGE_SHIFT`: added, and their stages join `board.rose`: a heavy-stage finding on a
  stage whose compute rose mid-run is dropped, now and after every later rule (a
  partition is heavy from the first step).
* `PIPELINE_LINK`, `RING_LINK`: consecutive link rules all read the same board; then a
  P2P link on the pipeline neighbour of a rank a ring named is dropped (the ring says
  which end of a veth throttled both ways it is), a `net-throttle` another rule named
  on a link's neighbour gives way to the link's own finding, and a link on ranks
  already named gives way to that finding (`merge_links`). Before them the board's
  slowed workers are set (`Board.slowed`): a link rule reads no link to them.

After every rule a stage-imbalance finding on a stage that rose is dropped (`not_heavy`).
The residual pass's findings are settled here too: `residual_part` keeps the part of one
that names what the board does not.

    findings = arbitrate(Signals(run=run, evidence=evidence, config=config))
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from stragglerlab.analysis.detectors.base import named_cells
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_links import (
    pipeline_ends,
    ring_ends,
    slowed_workers,
)
from stragglerlab.analysis.detectors.whatif_rules import (
    ESTIMATED,
    LINK_CAUSES,
    NO_EXCLUSION,
    STAGE_LIKE,
    Board,
    Exclusion,
    Threshold,
)
from stragglerlab.analysis.detectors.whatif_rules import THRESHOLDS as SHARED
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.ring_order import MIN_RING
from stragglerlab.run.findings import Finding, RootCause


class Settle(str, enum.Enum):
    """How a rule's candidates are settled against the board (module docstring's table)."""

    ADD = "add"
    FIRST_MATCH = "first-match"
    STAGE_SHIFT = "stage-shift"
    PIPELINE_LINK = "pipeline-link"
    RING_LINK = "ring-link"


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One line of the precedence table."""

    rule: str
    """Module name in `package` (imported on first use)."""
    settle: Settle
    """How its candidates are settled."""
    across_ranks: bool = True
    """A comparison across ranks (the residual pass runs it), not a change over time."""
    package: str = "stragglerlab.analysis.detectors.whatif_rules"
    """The package holding the rule's module (a plug-in's own, or a test's)."""

    @property
    def module(self) -> ModuleType:
        """The rule's module (its `rule`, `THRESHOLDS`, `EXCLUDES`)."""
        return importlib.import_module(f"{self.package}.{self.rule}")

    @property
    def excludes(self) -> Exclusion:
        """What suppresses the rule's candidates (its `EXCLUDES`; a plug-in rule without
        one: nothing)."""
        return getattr(self.module, "EXCLUDES", NO_EXCLUSION)

    def run(self, s: Signals, board: Board) -> list[Finding]:
        """The rule's candidates."""
        fn: Callable[[Signals, Board], list[Finding]] = self.module.rule
        return fn(s, board)

    def candidates(self, s: Signals, board: Board) -> list[Finding]:
        """The rule's candidates less those its exclusions drop (`excluded`); none on a
        failed run when that excludes it (the rule is then not run)."""
        excludes = self.excludes
        if excludes.failed_run and s.run.outcome != "ok":
            return []
        if excludes.board_has and any(f.root_cause in excludes.board_has
                                      for f in board.findings):
            return []
        return excluded(self.run(s, board), excludes, board)


PRECEDENCE: tuple[Entry, ...] = (
    Entry(rule="gc", settle=Settle.ADD),
    # The method's causes, first match (OSDI'25 §5): sequences, a heavy stage, stragglers
    # by step, the paper's worker issue, a quiet slow link.
    Entry(rule="sequence", settle=Settle.FIRST_MATCH),
    Entry(rule="stage", settle=Settle.FIRST_MATCH),
    Entry(rule="stragglers", settle=Settle.FIRST_MATCH),
    Entry(rule="worker_issue", settle=Settle.FIRST_MATCH),
    Entry(rule="quiet_link", settle=Settle.FIRST_MATCH),
    # Beside them: faults that need not make the job straggle, or that hide behind others.
    Entry(rule="slow_device", settle=Settle.ADD),
    Entry(rule="stage_shift", settle=Settle.STAGE_SHIFT),
    Entry(rule="pipeline_link", settle=Settle.PIPELINE_LINK),
    Entry(rule="ring_link", settle=Settle.RING_LINK),
    Entry(rule="late_arrival", settle=Settle.ADD),
    Entry(rule="stage_without_links", settle=Settle.ADD),
    Entry(rule="stage_by_compute", settle=Settle.ADD),
    # Over time, last: a regime change every rank shares, where nothing across ranks stood.
    Entry(rule="job_wide", settle=Settle.ADD, across_ranks=False),
)
"""The `whatif` detector's rules in order, each with how its candidates are settled."""


def across_ranks(table: tuple[Entry, ...] | None = None) -> tuple[Entry, ...]:
    """The table (default: `PRECEDENCE` as it stands) less the rules over time: what the
    residual pass runs (`whatif_residual.py`). A residual job is the run with the faults
    found taken out, so its steps change wherever a removed fault began or ended; that
    change is the removal's, not a regime the job shares."""
    return tuple(e for e in (PRECEDENCE if table is None else table)
                 if e.across_ranks)


ACROSS_RANKS: tuple[Entry, ...] = across_ranks()
"""`across_ranks` of the shipped table."""

_LINKS = (Settle.PIPELINE_LINK, Settle.RING_LINK)

SHARED_RULE = "(every rule)"
"""The rule column of the thresholds every rule shares (`whatif_rules.THRESHOLDS`)."""


def declared_thresholds(table: tuple[Entry, ...] | None = None
                        ) -> dict[str, tuple[str, Threshold]]:
    """Threshold name -> (the rule declaring it, its declaration): the shared thresholds,
    then each rule's `THRESHOLDS` in the order of `table` (default: `PRECEDENCE` as it
    stands). A name declared twice is a ValueError (one threshold, one owner)."""
    return _declared(PRECEDENCE if table is None else table)


@functools.cache
def _declared(table: tuple[Entry, ...]) -> dict[str, tuple[str, Threshold]]:
    out: dict[str, tuple[str, Threshold]] = {}
    for rule, declared in ((SHARED_RULE, SHARED),
                           *((e.rule, getattr(e.module, "THRESHOLDS", ())) for e in table)):
        for t in declared:
            if t.name in out:
                raise ValueError(f"threshold {t.name!r} is declared by {out[t.name][0]} and "
                                 f"{rule}: one threshold has one owner")
            out[t.name] = (rule, t)
    return out


def excluded(candidates: list[Finding], excludes: Exclusion, board: Board) -> list[Finding]:
    """Candidates less those on a worker a board finding of an excluding cause names (a
    candidate's first named worker: each such rule names one worker per finding)."""
    if not excludes.named_by or not candidates:
        return candidates
    named = named_cells([f for f in board.findings if f.root_cause in excludes.named_by])
    return [f for f in candidates
            if not f.ranks or (f.ranks[0].dp_rank, f.ranks[0].stage) not in named]


def _throttle_on(f: Finding, ends: set[tuple[int, int]]) -> bool:
    """A `net-throttle` naming only ranks in `ends`: a link seen from its other end."""
    return f.root_cause is RootCause.NET_THROTTLE and bool(f.ranks) and all(
        (r.dp_rank, r.stage) in ends for r in f.ranks)


def prefer_ring_ends(links: list[Finding], ring: list[Finding], dp: int) -> list[Finding]:
    """P2P link findings, less those on the pipeline neighbour of a rank a ring named
    (`whatif_ring.py`): a veth throttled both ways slows the P2P pairs of both ends, but
    only its own stage's ring, so the ring says which end it is. Only where the
    neighbour's own stage has a ring to show it (3 or more DP ranks)."""
    if dp < MIN_RING or not ring:
        return links
    ring_cells = named_cells(ring)
    ends = pipeline_ends(ring_cells) - ring_cells
    return [f for f in links if not _throttle_on(f, ends)]


def merge_links(found: list[Finding], links: list[Finding], ring: list[Finding] = (),
                dp: int = 0) -> list[Finding]:
    """The other rules' findings plus the slow links (P2P `links`, then `ring` links,
    `whatif_ring.py`) on ranks they did not name.

    A `net-throttle` another rule named from comm excess on a neighbour of a slow link
    is that link seen from its other end (a pair's excess lands on both ends; in a ring,
    on the ranks either side): the link's own finding replaces it. Neighbours: of a P2P
    link, same DP rank, next or previous stage; of a ring link, the same stage's DP
    ranks either side (mod `dp`).
    """
    p2p_cells, ring_cells = named_cells(links), named_cells(ring)
    ends = pipeline_ends(p2p_cells)
    if dp:
        ends |= ring_ends(ring_cells, dp)
    ends -= p2p_cells | ring_cells
    links = [*links, *ring]
    kept = [f for f in found if not _throttle_on(f, ends)]
    # A heavy stage or long sequences lengthen compute, never a transfer (end minus the
    # pair's latest start): a slow link on a rank they name is a fault of its own.
    named = named_cells([f for f in kept if f.root_cause not in STAGE_LIKE])
    # A link named with both ends (no trace tells them apart) gives way to a rule that
    # chose one of them as a slow link.
    chosen = named_cells([f for f in kept if f.root_cause is RootCause.NET_THROTTLE])
    return kept + [f for f in links if (f.ranks[0].dp_rank, f.ranks[0].stage) not in named
                   and not (len(f.ranks) > 1 and named_cells([f]) & chosen)]


def _link_ends(cells: set[tuple[int, int]], dp: int) -> set[tuple[int, int]]:
    """The cells and every rank they talk to: DP ring neighbours and pipeline neighbours."""
    return cells | ring_ends(cells, dp) | pipeline_ends(cells)


def residual_part(f: Finding, board: list[Finding], removed: list[Finding],
                  dp: int) -> Finding | None:
    """The part of a residual finding that names what the board does not, or None: the
    residual pass's precedence (`whatif_residual.py`'s docstring says why). `removed`:
    the findings taken out of the job before it was seen."""
    if f.root_cause in STAGE_LIKE and any(r.root_cause in ESTIMATED for r in removed):
        return None  # the stages' balance is then the removal's estimate, not the trace's
    if not f.ranks:
        return None if any(b.root_cause is f.root_cause for b in board) else f
    covered = named_cells([b for b in board if b.root_cause is RootCause.SLOW_WORKER])
    covered |= {c for b in board if b.root_cause in LINK_CAUSES
                for c in _link_ends(named_cells([b]), dp)}
    covered |= named_cells([b for b in board if b.root_cause is f.root_cause])
    fresh = [r for r in f.ranks if (r.dp_rank, r.stage) not in covered]
    if not fresh:
        return None
    if f.root_cause is RootCause.STAGE_IMBALANCE:
        return f
    return dataclasses.replace(f, ranks=fresh)


def not_heavy(findings: list[Finding], rose: set[int]) -> list[Finding]:
    """The findings less any stage-imbalance on a stage whose compute rose mid-run."""
    return [f for f in findings if f.root_cause is not RootCause.STAGE_IMBALANCE
            or not {r.stage for r in f.ranks} <= rose]


def _not_gc_again(candidates: list[Finding], board: Board) -> list[Finding]:
    """Candidates less those naming only workers a `gc-pauses` finding names."""
    gc = named_cells([f for f in board.findings if f.root_cause is RootCause.GC_PAUSES])
    return [f for f in candidates if not f.ranks or not named_cells([f]) <= gc]


def arbitrate(s: Signals, table: tuple[Entry, ...] | None = None) -> list[Finding]:
    """Run the rules of `table` (default: `PRECEDENCE` as it stands) in order and settle
    their candidates (module docstring)."""
    table = PRECEDENCE if table is None else table
    board = Board()
    i = 0
    while i < len(table):
        entry = table[i]
        mode = entry.settle
        if mode is Settle.FIRST_MATCH:
            group = []
            while i < len(table) and table[i].settle is Settle.FIRST_MATCH:
                group.append(table[i])
                i += 1
            for member in group:
                candidates = member.candidates(s, board)
                if candidates:
                    board.findings += _not_gc_again(candidates, board)
                    break
        elif mode in _LINKS:
            p2p, ring = [], []
            board.slowed = slowed_workers(board.findings)
            while i < len(table) and table[i].settle in _LINKS:
                found = table[i].candidates(s, board)  # every link rule reads one board
                (ring if table[i].settle is Settle.RING_LINK else p2p).extend(found)
                i += 1
            dp = s.run.meta.dp_size
            p2p = prefer_ring_ends(p2p, ring, dp)
            board.findings = merge_links(board.findings, p2p, ring, dp)
            board.links = p2p + ring
        else:
            i += 1
            candidates = entry.candidates(s, board)
            if mode is Settle.STAGE_SHIFT:
                board.rose |= {r.stage for f in candidates for r in f.ranks}
            board.findings = board.findings + candidates
        board.findings = not_heavy(board.findings, board.rose)
    return board.findings


def rules_config(config: WhatIfDetectorConfig | None = None,
                 table: tuple[Entry, ...] | None = None) -> WhatIfDetectorConfig:
    """`config` (default: the defaults) holding every threshold the rules of `table`
    (default: `PRECEDENCE` as it stands) declare. The shipped rules' thresholds are
    `WhatIfDetectorConfig`'s own fields; a threshold a newer rule declares that the config
    lacks becomes a field of a subclass, at its declared default, so a rule added with its
    own threshold is set by `detect --set`, the workflow and the noise floor like any
    other (docs/layout.md, "Adding a rule")."""
    config = WhatIfDetectorConfig() if config is None else config
    cls = _config_class(PRECEDENCE if table is None else table)
    if isinstance(config, cls):
        return config
    return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})


@functools.cache
def _config_class(table: tuple[Entry, ...]) -> type[WhatIfDetectorConfig]:
    """`WhatIfDetectorConfig`, or its subclass with a field per declared threshold it
    lacks."""
    have = {f.name for f in dataclasses.fields(WhatIfDetectorConfig)}
    extra = [t for _, t in _declared(table).values() if t.name not in have]
    if not extra:
        return WhatIfDetectorConfig
    return dataclasses.make_dataclass(
        WhatIfDetectorConfig.__name__,
        [(t.name, type(t.value), dataclasses.field(default=t.value)) for t in extra],
        bases=(WhatIfDetectorConfig,), frozen=True, kw_only=True)
