"""Stage imbalance for the `whatif` detector: one stage heavier than the others (the
`stage` rule), also looked for again once slow links are explained and their steps removed.

Pure functions of a run, its what-if view and the detector's config:

    stage_imbalance(run, evidence.view, steps, cfg)        # Finding | None
    stage_without_links(run, links, steps, cfg)           # re-analysed without the links
    stage_by_compute(run, steps, cfg)                     # from compute ops alone
"""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run
from stragglerlab.analysis.detectors.signatures import (
    category_excess,
    stage_compute_ratios,
    stage_constancy,
)
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_evidence import Evidence
from stragglerlab.run.results import IdealView


def stage_imbalance(run: Run, result: IdealView, steps: np.ndarray,
                    cfg: WhatIfDetectorConfig) -> Finding | None:
    """A stage slower than the others, all its DP ranks alike, in computation."""
    s_stage = np.asarray(result.s_stage, dtype=float)
    heavy = int(np.argmax(s_stage))
    ratio = float(s_stage[heavy] / s_stage.min())
    if len(s_stage) < 2 or ratio < cfg.stage_ratio \
            or result.slowdown < cfg.straggling_slowdown:
        return None  # stages always differ a little; only a straggling job is imbalanced
    members = result.worker_score[heavy] - 1.0  # [dp]
    if run.meta.dp_size > 1 and members.min() < cfg.peer_share * members.max():
        return None  # one DP rank carries the stage: a worker, not the stage
    compute_excess, comm_excess = category_excess(result)
    if comm_excess > compute_excess:
        return None  # a slow link, not a heavy stage
    constancy = stage_constancy(result.step_s_stage, heavy)
    if constancy is not None and constancy < cfg.stage_constancy:
        return None  # the stage was not always heavy: a device slowed mid-run
    return Finding(
        [run.worker(d, heavy) for d in range(run.meta.dp_size)],
        int(steps[0]), int(steps[-1]), RootCause.STAGE_IMBALANCE,
        confidence=float(min(1.0, 0.5 + (ratio - cfg.stage_ratio) * 2)),
        estimated_slowdown=result.slowdown,
        detail={"stage_ratio": ratio, "m_s": result.m_s.rem, "stage_constancy": constancy,
                "s_stage": [float(v) for v in s_stage]})


def stage_without_links(run: Run, links: list[Finding], steps: np.ndarray,
                        cfg: WhatIfDetectorConfig) -> Finding | None:
    """A heavy stage that slow links hid: explain the links, remove their steps,
    re-analyse. A throttled link's transfers enter the ideal (each op type's mean), so the
    job's S no longer says what the stages cost; the steps outside every link's window
    say it again. The finding spans the run (a stage is heavy from the start)."""
    clean = steps[~np.any([(steps >= f.first_step) & (steps <= f.last_step)
                           for f in links], axis=0)]
    if len(clean) < cfg.min_steps:
        return None
    part = Run(run.trace[run.trace["step"].isin(clean)], run.meta, run.path)
    stage = stage_imbalance(part, Evidence.analyse(part).view, clean, cfg)
    if stage is None:
        return None
    stage.first_step, stage.last_step = int(steps[0]), int(steps[-1])
    stage.detail["without_link_steps"] = [int(s) for s in clean]
    return stage


HEAVY_STEP_QUANTILE = 0.1
"""The heavy stage must be heavy in all but this share of the steps (a constant offset)."""


def stage_by_compute(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig) -> Finding | None:
    """A stage heavy by its own compute from start to end, on every DP rank: explain the
    other faults (a link, a slow worker) by leaving out what they change, waits and
    transfers, and look at the compute ops alone. The finding spans the run."""
    ratios = stage_compute_ratios(run.trace, run.meta.pp_size)
    if ratios is None or ratios.shape[1] < cfg.min_steps:
        return None
    low = np.nanquantile(ratios, HEAVY_STEP_QUANTILE, axis=1)  # [stage]
    if np.all(np.isnan(low)):
        return None
    heavy = int(np.nanargmax(low))
    if low[heavy] < cfg.stage_compute_ratio:
        return None
    return Finding(
        [run.worker(d, heavy) for d in range(run.meta.dp_size)],
        int(steps[0]), int(steps[-1]), RootCause.STAGE_IMBALANCE,
        confidence=float(min(1.0, 0.5 + (low[heavy] - cfg.stage_compute_ratio) * 2)),
        estimated_slowdown=None,
        detail={"stage_compute_ratio": float(low[heavy]), "test": "compute"})
