"""Per-rank, per-step metric matrices shared by the bocd, minder and nvrx baselines.

One groupby over the trace gives, for every traced worker and step, its
compute time (forward + backward), its communication time (P2P and
collectives, waiting included, as a per-rank timer sees it) and its own
iteration time (its last end minus its first start). Pure pandas / numpy,
vectorized over ranks and steps.

    m = rank_step_metrics(run.trace, run.meta)   # m.values["compute"]: [ranks, steps]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import COMMUNICATION_OPS
from stragglerlab.trace.step_view import GENERAL_COMM, GENERAL_COMPUTE

COMPUTE = ("forward-compute", "backward-compute", GENERAL_COMPUTE)
"""Optypes of a worker's own compute (the op vocabulary's, and an unannotated import's
compute segments)."""
COMM = (*sorted(t.value for t in COMMUNICATION_OPS), GENERAL_COMM)
"""Optypes of communication (the vocabulary's kinds, and an import's any kind)."""
METRICS = ("iteration", "compute", "comm")
"""Metric names of `RankStepMetrics.values`."""


@dataclass(frozen=True, kw_only=True)
class RankStepMetrics:
    """Per rank and step: iteration, compute and communication time, s."""

    steps: np.ndarray
    """Step numbers, ascending, [steps]."""
    values: dict[str, np.ndarray]
    """Metric name -> [world, steps] (NaN where a rank has no op of that kind in a step)."""
    stage_of_rank: np.ndarray
    """[world] stage of each global rank (rank = stage * dp + dp_rank)."""


def rank_step_metrics(trace: pd.DataFrame, meta: JobMeta) -> RankStepMetrics:
    """The metric matrices of a trace (see the module docstring)."""
    world = meta.dp_size * meta.pp_size
    steps = np.sort(trace["step"].unique())
    col = np.searchsorted(steps, trace["step"].to_numpy())
    rank = trace["rank"].to_numpy(dtype=np.int64)
    dur = trace["duration"].to_numpy(dtype=float)
    start = trace["start_ts"].to_numpy(dtype=float)
    opt = trace["optype"].astype(str).to_numpy()
    flat = rank * len(steps) + col
    size = world * len(steps)

    def summed(mask: np.ndarray) -> np.ndarray:
        out = np.bincount(flat[mask], weights=dur[mask], minlength=size).astype(float)
        seen = np.bincount(flat[mask], minlength=size) > 0
        return np.where(seen, out, np.nan).reshape(world, len(steps))

    first = np.full(size, np.inf)
    last = np.full(size, -np.inf)
    np.minimum.at(first, flat, start)
    np.maximum.at(last, flat, start + dur)
    iteration = np.where(np.isfinite(first), last - first, np.nan).reshape(world, len(steps))
    return RankStepMetrics(
        steps=steps,
        values={"iteration": iteration, "compute": summed(np.isin(opt, COMPUTE)),
                "comm": summed(np.isin(opt, COMM))},
        stage_of_rank=np.arange(world) // meta.dp_size)
