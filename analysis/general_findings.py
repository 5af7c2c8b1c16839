"""Findings of the `whatif` detector on an unannotated import (the general op model).

The vocabulary `whatif` detector reads per-op evidence named by the Megatron
op vocabulary; an unannotated import has none. Its own what-if
(analysis/whatif_general.py) still says which ranks cost the job how much and
in what: compute (split into host and device time on GPU traces) or a
communication kind. Findings follow from that result and the method alone:

* no finding where the reproduction gate withholds the verdict (the numbers
  are the model's, not the job's), nor on a job whose S is under the paper's
  straggling threshold (1.1);
* else every rank whose S_rank (the job with only that rank left original)
  reaches a share MIN_RANK_SHARE of the job's excess (S - 1) is named, with
  S_rank as its estimated slowdown; unless every rank does: a straggler is
  slower than its peers, and an excess that each rank carries alike (a
  loaded host descheduling every rank in turn: a clean 2-rank FSDP run read
  S 1.146 with both ranks at 1.09) has none;
* the cause is the kind that carries most of the excess: compute (host or
  device) -> slow-worker; a communication kind -> net-throttle (a slow link
  and a delayed one read alike here). Where the named ranks are every DP rank
  of one pipeline stage (DP >= 2) and compute carries the excess, the stage
  is heavier than the others (the ideal loads every stage evenly:
  analysis/whatif_general.py), not a worker: one stage-imbalance finding
  names them all. With DP 1 a heavy stage and a slow worker are one rank and
  read as a slow worker;
* the steps are those whose per-step S reaches the threshold (all steps when
  none alone does).

    findings = general_findings(read_whatif_summary("out"))
    findings = import_findings("out")   # the same
"""

from __future__ import annotations

from pathlib import Path

from stragglerlab.run.findings import Finding, RankRef, RootCause
from stragglerlab.run.validity import STRAGGLING_S
from stragglerlab.run.whatif_reader import read_whatif_summary
from stragglerlab.run.whatif_summary import WhatIfSummary
from stragglerlab.trace.op_model import COMPUTE

MIN_RANK_SHARE = 0.5
"""A rank is named when leaving it alone original recovers at least this share of the job's
excess slowdown (S_rank - 1 >= share x (S - 1)): with one straggler S_rank ~ S, a rank that
only waited for it reads ~1."""


def import_findings(folder: str | Path) -> list[Finding]:
    """The findings of the import at `folder`, from its whatif.json (one clear error for a
    damaged or missing file)."""
    return general_findings(read_whatif_summary(Path(folder) / "whatif.json"))


def general_findings(summary: WhatIfSummary) -> list[Finding]:
    """The findings of an unannotated import's what-if result (module doc)."""
    s = summary.S
    if summary.validity.verdict(s) is not True or not summary.by_rank:
        return []
    by_rank = summary.by_rank
    w = summary.workers
    coords = ({int(r): (int(d), int(p)) for r, d, p in zip(w.rank, w.dp_rank, w.stage)}
              if w.has_layout else {})
    named = sorted((r for r, v in by_rank.items() if v - 1.0 >= MIN_RANK_SHARE * (s - 1.0)),
                   key=lambda r: -by_rank[r])
    if not named or (len(named) == len(by_rank) > 1):
        return []
    kinds = dict(summary.by_kind)
    top = max(kinds, key=lambda k: kinds[k]) if kinds else COMPUTE
    cause = RootCause.SLOW_WORKER if top == COMPUTE else RootCause.NET_THROTTLE
    per_step = dict(zip(summary.steps.step.tolist(), summary.steps.s.tolist()))
    hot = sorted(k for k, v in per_step.items() if v >= STRAGGLING_S) or sorted(per_step)
    detail = {"kind": top, "by_kind": kinds, "by_segment_part": dict(summary.by_part),
              "model": "general", "host_model": summary.host_model}
    stage = _whole_stage(named, coords)
    if stage is not None and cause is RootCause.SLOW_WORKER:
        return [Finding(
            ranks=[RankRef(rank=r, dp_rank=coords[r][0], stage=coords[r][1])
                   for r in sorted(named)],
            first_step=hot[0], last_step=hot[-1], root_cause=RootCause.STAGE_IMBALANCE,
            confidence=min(1.0, min(by_rank[r] - 1.0 for r in named) / (s - 1.0)),
            estimated_slowdown=s, detail={**detail, "stage": stage})]
    return [Finding(
        ranks=[RankRef(rank=r, dp_rank=coords.get(r, (r, 0))[0],
                       stage=coords.get(r, (r, 0))[1])],
        first_step=hot[0], last_step=hot[-1], root_cause=cause,
        confidence=min(1.0, (by_rank[r] - 1.0) / (s - 1.0)),
        estimated_slowdown=by_rank[r], detail=detail)
        for r in named]


def _whole_stage(named: list[int], coords: dict[int, tuple[int, int]]) -> int | None:
    """The stage whose every rank, and no other, is named, where there are several stages
    of two or more DP ranks each; else None."""
    if not coords or not named:
        return None
    stages = {coords[r][1] for r in named}
    if len(stages) != 1 or len({p for _d, p in coords.values()}) < 2:
        return None
    (stage,) = stages
    members = {r for r, (_d, p) in coords.items() if p == stage}
    return stage if len(members) >= 2 and members == set(named) else None
