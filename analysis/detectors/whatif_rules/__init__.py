"""The rules of the `whatif` detector: one module per rule, one signature.

    def rule(s: Signals, board: Board) -> list[Finding]

A rule reads the evidence (`whatif_signals.Signals`: the what-if metrics and the
signals derived from them, each computed once) and what the rules before it settled
(`Board`), and returns its candidate findings, each carrying the evidence that made
it in `detail`. It never removes or edits another rule's finding: overlaps are
settled by the precedence table (`whatif_arbitration.PRECEDENCE`), the one place that
says which rule wins.

Adding a rule: write `whatif_rules/<name>.py` with a `rule` function of this
signature (read thresholds from `s.config`; add a field with its docstring to
`whatif_config.WhatIfDetectorConfig` if it needs a new one), then add one line to
`PRECEDENCE` saying where it stands and how its candidates are settled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stragglerlab.run.findings import Finding, RootCause

STAGE_LIKE = (RootCause.STAGE_IMBALANCE, RootCause.SEQ_IMBALANCE)
"""Causes read off the job's shape (a heavy partition, long sequences): they lengthen
compute from the first step, never a transfer, and an estimated removal moves them."""


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
