"""The `whatif` detector's precedence table and its arbitration, with stand-in rules
(pure: no trace, no analysis), plus the contract that every rule module is in the table."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass

import pytest

from stragglerlab.analysis.detectors import whatif_rules
from stragglerlab.analysis.detectors.whatif_arbitration import (
    PRECEDENCE,
    Entry,
    Settle,
    arbitrate,
)
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

    def run(self, s, board):
        if self.ran is not None:
            self.ran.append(self.rule)
        return list(self.out)


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


@pytest.mark.parametrize(("on_board", "mode", "runs"), [
    (RootCause.STAGE_IMBALANCE, Settle.UNLESS_STAGE, False),
    (RootCause.SEQ_IMBALANCE, Settle.UNLESS_STAGE, True),
    (RootCause.SEQ_IMBALANCE, Settle.UNLESS_STAGE_LIKE, False),
    (RootCause.SLOW_WORKER, Settle.UNLESS_STAGE_LIKE, True),
])
def test_conditional_rules_run_only_when_no_stage_finding_stands(on_board, mode, runs):
    ran = []
    table = (Fake(rule="first", settle=Settle.ADD, out=(finding(on_board, (0, 0)),)),
             Fake(rule="cond", settle=mode, ran=ran,
                  out=(finding(RootCause.STAGE_IMBALANCE, (0, 1)),)))
    found = arbitrate(_Signals(), table)
    assert (ran == ["cond"]) is runs
    assert len(found) == (2 if runs else 1)


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
