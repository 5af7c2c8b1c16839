"""The `whatif` detector's precedence table and its arbitration, with stand-in rules
(pure: no trace, no analysis), plus the contract that every rule module is in the table."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from stragglerlab.analysis.detectors import whatif_rules
from stragglerlab.analysis.detectors.whatif_arbitration import (
    PRECEDENCE,
    Entry,
    Settle,
    arbitrate,
)
from stragglerlab.analysis.detectors.whatif_rules import NO_EXCLUSION, STAGE_LIKE, Exclusion
from stragglerlab.run.findings import Finding, RankRef, RootCause


class _Meta:
    dp_size, pp_size = 4, 2


class _Run:
    meta = _Meta()


class _Signals:
    run = _Run()


@dataclass(frozen=True, kw_only=True)
class Fake(Entry):
    """A rule that proposes fixed candidates and records that it ran."""

    out: tuple = ()
    ran: list | None = None

    @property
    def excludes(self):
        return NO_EXCLUSION

    def run(self, s, board):
        if self.ran is not None:
            self.ran.append(self.rule)
        return list(self.out)


@dataclass(frozen=True, kw_only=True)
class Excluding(Fake):
    """A fake rule with declared exclusions."""

    excl: Exclusion = NO_EXCLUSION

    @property
    def excludes(self):
        return self.excl


def finding(cause: RootCause, *cells: tuple[int, int]) -> Finding:
    ranks = [RankRef(rank=p * 4 + d, dp_rank=d, stage=p) for d, p in cells]
    return Finding(ranks, 0, 9, cause, confidence=0.9, estimated_slowdown=1.2)


def causes(findings):
    return [(f.root_cause, sorted((r.dp_rank, r.stage) for r in f.ranks)) for f in findings]


def test_every_rule_module_stands_in_the_table_once():
    modules = {m.name for m in pkgutil.iter_modules(whatif_rules.__path__)}
    named = [e.rule for e in PRECEDENCE]
    assert sorted(named) == sorted(set(named)), "a rule listed twice"
    assert set(named) == modules, f"not in PRECEDENCE: {modules - set(named)}; " \
                                  f"no module: {set(named) - modules}"
    for name in modules:
        fn = importlib.import_module(f"{whatif_rules.__name__}.{name}").rule
        assert list(inspect.signature(fn).parameters) == ["s", "board"], name


def test_first_match_runs_until_one_rule_has_candidates():
    ran = []
    table = (Fake(rule="a", settle=Settle.FIRST_MATCH, ran=ran),
             Fake(rule="b", settle=Settle.FIRST_MATCH, ran=ran,
                  out=(finding(RootCause.SLOW_WORKER, (1, 0)),)),
             Fake(rule="c", settle=Settle.FIRST_MATCH, ran=ran,
                  out=(finding(RootCause.NET_THROTTLE, (2, 0)),)),
             Fake(rule="d", settle=Settle.ADD, ran=ran))
    found = arbitrate(_Signals(), table)
    assert ran == ["a", "b", "d"]
    assert causes(found) == [(RootCause.SLOW_WORKER, [(1, 0)])]


def test_a_first_match_naming_only_gc_workers_is_gc_seen_again():
    gc = finding(RootCause.GC_PAUSES, (0, 0), (1, 0))
    table = (Fake(rule="gc", settle=Settle.ADD, out=(gc,)),
             Fake(rule="s", settle=Settle.FIRST_MATCH,
                  out=(finding(RootCause.SLOW_WORKER, (1, 0)),
                       finding(RootCause.SLOW_WORKER, (3, 1)))))
    assert causes(arbitrate(_Signals(), table)) == [
        (RootCause.GC_PAUSES, [(0, 0), (1, 0)]), (RootCause.SLOW_WORKER, [(3, 1)])]


def test_a_stage_that_rose_mid_run_is_no_heavy_stage_now_or_later():
    heavy = finding(RootCause.STAGE_IMBALANCE, *[(d, 1) for d in range(4)])
    shifted = finding(RootCause.SLOW_WORKER, *[(d, 1) for d in range(4)])
    table = (Fake(rule="stage", settle=Settle.FIRST_MATCH, out=(heavy,)),
             Fake(rule="shift", settle=Settle.STAGE_SHIFT, out=(shifted,)),
             Fake(rule="late", settle=Settle.ADD, out=(heavy,)))
    assert causes(arbitrate(_Signals(), table)) == [
        (RootCause.SLOW_WORKER, [(d, 1) for d in range(4)])]


STAGE = Exclusion(board_has=frozenset({RootCause.STAGE_IMBALANCE}))
STAGE_OR_SEQ = Exclusion(board_has=frozenset(STAGE_LIKE))
ANY = Exclusion(board_has=frozenset(RootCause))


@pytest.mark.parametrize(("on_board", "excl", "runs"), [
    (RootCause.STAGE_IMBALANCE, STAGE, False),
    (RootCause.SEQ_IMBALANCE, STAGE, True),
    (RootCause.SEQ_IMBALANCE, STAGE_OR_SEQ, False),
    (RootCause.SLOW_WORKER, STAGE_OR_SEQ, True),
    (RootCause.SLOW_WORKER, ANY, False),
    (None, ANY, True),
])
def test_conditional_rules_run_only_when_no_excluding_finding_stands(on_board, excl, runs):
    ran = []
    first = () if on_board is None else (finding(on_board, (0, 0)),)
    table = (Fake(rule="first", settle=Settle.ADD, out=first),
             Excluding(rule="cond", settle=Settle.ADD, ran=ran, excl=excl,
                       out=(finding(RootCause.STAGE_IMBALANCE, (0, 1)),)))
    found = arbitrate(_Signals(), table)
    assert (ran == ["cond"]) is runs
    assert len(found) == len(first) + runs


def test_the_shipped_conditions_are_the_rules_declared_exclusions():
    by_rule = {e.rule: e for e in PRECEDENCE}
    assert by_rule["stage_without_links"].excludes == STAGE
    assert by_rule["stage_by_compute"].excludes == STAGE_OR_SEQ
    assert by_rule["job_wide"].excludes == Exclusion(failed_run=True, board_has=ANY.board_has)
    assert [e.rule for e in PRECEDENCE if not e.across_ranks] == ["job_wide"]


def test_a_link_gives_way_to_a_finding_on_its_ranks_and_replaces_its_far_end():
    # (1, 0) is slow already; the link rule names (1, 0) and (2, 1): the first gives way.
    # A net-throttle another rule put on (2, 0), the P2P neighbour of the link at (2, 1),
    # is that link seen from its other end and is replaced by it.
    table = (Fake(rule="w", settle=Settle.ADD, out=(finding(RootCause.SLOW_WORKER, (1, 0)),
                                                    finding(RootCause.NET_THROTTLE, (2, 0)))),
             Fake(rule="p2p", settle=Settle.PIPELINE_LINK,
                  out=(finding(RootCause.NET_THROTTLE, (1, 0)),
                       finding(RootCause.NET_THROTTLE, (2, 1)))))
    assert causes(arbitrate(_Signals(), table)) == [
        (RootCause.SLOW_WORKER, [(1, 0)]), (RootCause.NET_THROTTLE, [(2, 1)])]


def test_the_arbitration_applies_a_rules_exclusions_not_the_rule():
    gc, slow = finding(RootCause.GC_PAUSES, (1, 0)), finding(RootCause.SLOW_WORKER, (0, 0))
    device = [finding(RootCause.SLOW_WORKER, c) for c in ((0, 0), (1, 0), (2, 0))]
    table = (Fake(rule="gc", settle=Settle.ADD, out=(gc,)),
             Fake(rule="stragglers", settle=Settle.ADD, out=(slow,)),
             Excluding(rule="device", settle=Settle.ADD, out=tuple(device),
                       excl=Exclusion.any_cause_but(RootCause.GC_PAUSES)))
    # the slow worker keeps its cell; the GC victim does not hide a slow device
    assert causes(arbitrate(_Signals(), table)) == causes([gc, slow, device[1], device[2]])
    table = table[:2] + (dataclasses.replace(table[2], excl=Exclusion.any_cause_but()),)
    assert causes(arbitrate(_Signals(), table)) == causes([gc, slow, device[2]])


def test_no_rule_filters_the_board_itself():
    """A rule reads what the arbitration settled (`Board.slowed`, `Board.links`), never
    the findings themselves: which finding wins is the precedence table's and the rules'
    declared `EXCLUDES`."""
    for m in pkgutil.iter_modules(whatif_rules.__path__):
        text = (Path(whatif_rules.__path__[0]) / f"{m.name}.py").read_text()
        assert "board.findings" not in text, m.name
        module = importlib.import_module(f"{whatif_rules.__name__}.{m.name}")
        assert isinstance(getattr(module, "EXCLUDES", None), Exclusion), m.name
