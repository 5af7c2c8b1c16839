"""Slow links for the `whatif` detector, localized from ring-collective transfer excess.

With one stage there are no P2P pairs to time (`whatif_links.py`), only the DP
collectives, and a ring makes every rank wait for its slowest link alike: a
throttled rank's own ops start and end like anyone's. What a slow link does
leave is *where in the ring* the transfer time lands. The gradient
reduce-scatter and the parameter all-gather pass chunks around the ranks in
order (gloo's ring, the backend on CPU), so a rank v throttled both ways
(tc on its veth) holds back the chunks it forwards: in the reduce-scatter the
rank before it (v - 1) leaves the collective late and the rank after it
(v + 1) early; in the all-gather the other way round. Per step, with each
rank's transfer excess X[r] (transfer duration - the step's median, design.md
§4), the candidate score is

    RS[v - 1] - RS[v + 1] + AG[v + 1] - AG[v - 1]     (ranks mod dp)

as a share of the step. A rank whose score stays at least `ring_step_share`
over `min_steps` consecutive steps is named `net-throttle`, unless another
rule named it, and so is every other such rank that is not a ring neighbour of
one named (a strong link leaves some of its pattern beside it).

Where the ring's transfers changed regime (`over_time.slow_regime` of the
median rank's transfer: 1.5x or more over a sustained window) for at least
2 x `min_steps` steps, a link is placed only where the score also keeps its
sign over the slower regime's steps: its mean over them stands
`over_time.NOISE_SDS` standard errors over zero (`over_time.holds_sign`; the
regime is chosen by the transfers, not by the score, so a stretch of noise
that happens to share a sign is not its own evidence). Over fewer steps (an
online window's first steps of a regime) the spread is not measured well
enough to hold a link to (one throttled link's score read 0.38, 0.15 and
0.11 of a step over its first three), and the threshold decides alone.
When every link of the ring is slowed alike (in DP 4, ranks v and v + 2
throttled both ways slow all four links; in a ring of 4 the score is
antisymmetric, score[v] = -score[v + 2], and the two throttles cancel) the
score is zero-mean noise at the scale of the slowed transfers (0.03-0.16 of a
step with 1-s transfers, against at most 0.014 on clean runs), which three
steps in a row can hold over `ring_step_share`; it then flips sign, and the
change is the job's, not a link's (`whatif_rules/job_wide.py`). Busy hosts,
slow devices, GC and sequence imbalance move a rank's exit time on both
collectives alike, so the signed neighbour differences cancel (dev: at most
2.3 % of a step; the throttles 9.6-15 %).

A ring of two (DP 2) has one link, and both ranks are each other's neighbours
(v - 1 = v + 1, the score is 0): as for a two-stage pure-PP job, its reference
is the run's quietest window, and a link whose transfers stay slow over it is
named with both ends (`two_rank_link`), since no trace can tell them apart.

With stages, each stage's DP ranks run their own ring (its gradients and
parameters), so the same score is read in every stage's group of 3 or more DP
ranks. There it also settles which end of a slow P2P link is throttled: a veth
throttled both ways slows the P2P pairs on both ends of a pipeline link, but
only its own stage's ring (`whatif_arbitration.prefer_ring_ends`). A ring of two with
stages is left to the P2P tests, which see both of its ends' links.

What it cannot see (and names nothing): with 3 or more ranks, an in-process delay (the
victim sleeps inside its traced collective and everyone leaves the ring together),
a collective that is not a reduce-scatter/all-gather pair (a plain
all-reduce), and, until measured there, NCCL, whose ring may run the other
way.

    stragglerlab detect --run results/dev/dev-11/11 --detector whatif
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run
from stragglerlab.analysis.detectors.signatures import mean_step_time
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.over_time import holds_sign, slow_regime
from stragglerlab.method.grouped import group_sum, optype_mask, row_codes

REDUCE_SCATTER = "grads-reduce-scatter"
ALL_GATHER = "params-all-gather"
MIN_RING = 3
"""DP ranks a ring needs for its two neighbours of a rank to differ."""


def transfer_by_rank(trace: pd.DataFrame, optype: str, dp: int,
                     steps: np.ndarray) -> np.ndarray | None:
    """[step, dp_rank]: each rank's transfer duration of `optype` (its end minus the latest
    start in the step's group, clamped at 0), s; NaN where a rank has no such op, None when
    the trace has none."""
    ops = trace[(trace["optype"] == optype) & trace["step"].isin(steps)
                & trace["dp_rank"].between(0, dp - 1)]
    if ops.empty:
        return None
    end = ops["start_ts"] + ops["duration"]
    latest = ops.groupby("step")["start_ts"].transform("max")
    transfer = (end - latest).clip(lower=0.0)
    per = transfer.groupby([ops["step"], ops["dp_rank"]]).sum()
    grid = np.full((len(steps), dp), np.nan)
    grid[np.searchsorted(steps, per.index.get_level_values(0)),
         per.index.get_level_values(1)] = per.to_numpy()
    return grid


def stage_transfers(trace: pd.DataFrame, optype: str, dp: int,
                    steps: np.ndarray) -> dict[int, np.ndarray | None]:
    """`transfer_by_rank` of each stage's ops ({stage: grid or None}, the stages of the
    trace), in one pass over the trace's arrays: the same numbers (the step's latest start
    by max, the clamp, each rank's sum as pandas' groupby sum adds it, grouped.group_sum),
    without splitting the frame by stage and grouping it per stage (at 1,024 workers the
    ring rule's cost in the live monitor's window)."""
    stage = trace["stage"].to_numpy()
    step, dp_rank = trace["step"].to_numpy(), trace["dp_rank"].to_numpy()
    rows = np.flatnonzero(optype_mask(trace["optype"], [optype]) & np.isin(step, steps)
                          & (dp_rank >= 0) & (dp_rank <= dp - 1))
    start = trace["start_ts"].to_numpy()[rows]
    end = start + trace["duration"].to_numpy()[rows]
    step_i, dp_rank, stage_of = np.searchsorted(steps, step[rows]), dp_rank[rows], stage[rows]
    out: dict[int, np.ndarray | None] = {}
    for s in np.unique(stage).tolist():
        at = np.flatnonzero(stage_of == s)  # the stage's ops, in the trace's row order
        if not len(at):
            out[s] = None
            continue
        si, d = step_i[at], dp_rank[at]
        latest = np.full(len(steps), -np.inf)
        np.maximum.at(latest, si, start[at])
        transfer = end[at] - latest[si]
        transfer = np.where(np.isnan(transfer) | (transfer >= 0.0), transfer, 0.0)  # clip
        code, n = row_codes([si, d])
        first = np.zeros(n, dtype=np.int64)
        first[code[::-1]] = np.arange(len(code))[::-1]
        grid = np.full((len(steps), dp), np.nan)
        grid[si[first], d[first]] = group_sum(code, transfer, n)
        out[s] = grid
    return out


def transfer_excess(trace: pd.DataFrame, optype: str, dp: int,
                    steps: np.ndarray) -> np.ndarray | None:
    """[step, dp_rank]: `transfer_by_rank` minus the step's median over ranks, s (0 where
    a rank has no such op); None when the trace has none."""
    return _excess(transfer_by_rank(trace, optype, dp, steps))


def _excess(grid: np.ndarray | None) -> np.ndarray | None:
    """`transfer_excess` of a `transfer_by_rank` grid."""
    if grid is None:
        return None
    with warnings.catch_warnings():  # a step no rank finished (a failed run) stays NaN -> 0
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nan_to_num(grid - np.nanmedian(grid, axis=1, keepdims=True))


def ring_scores(trace: pd.DataFrame, dp: int, steps: np.ndarray,
                step_s: float | None = None) -> np.ndarray | None:
    """[step, candidate rank]: the signed neighbour excess of the module docstring as a
    share of the mean step (`step_s`, default: the trace's); None without both
    collectives or with fewer than 3 DP ranks. `trace` holds one ring: one stage's ops."""
    if dp < MIN_RING:
        return None
    rs = transfer_excess(trace, REDUCE_SCATTER, dp, steps)
    ag = transfer_excess(trace, ALL_GATHER, dp, steps)
    return _scores(rs, ag, dp, lambda: step_s if step_s is not None else mean_step_time(trace))


def _scores(rs: np.ndarray | None, ag: np.ndarray | None, dp: int,
            step_s) -> np.ndarray | None:
    """`ring_scores` from the two collectives' excess grids; step_s: the mean step, called."""
    if rs is None or ag is None:
        return None
    v = np.arange(dp)
    before, after = (v - 1) % dp, (v + 1) % dp
    score = rs[:, before] - rs[:, after] + ag[:, after] - ag[:, before]
    return score / max(step_s(), 1e-12)


def ring_links(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
               slowdown: float, slow: set[tuple[int, int]] = frozenset()) -> list[Finding]:
    """The ranks throttled ring links point at, in every stage's DP group of 3 or more
    ranks (see the module docstring); in pure DP with two ranks, the one link itself
    (`two_rank_link`).

    slow: (dp_rank, stage) of workers another rule named a slow device or GC victim. Its
    ring neighbours are not named: a slow rank's own reduce-scatter and all-gather
    excess differ (gloo reduces on the CPU in the one, not the other), and each
    neighbour's score holds that difference, one with each sign."""
    pp, dp = run.meta.pp_size, run.meta.dp_size
    if len(steps) < cfg.min_steps:
        return []
    if dp == 2 and pp == 1:
        link = two_rank_link(run, steps, cfg, slowdown)
        return [link] if link is not None else []
    if dp < MIN_RING:
        return []
    step_s = mean_step_time(run.trace)
    found = []
    rs, ag = (stage_transfers(run.trace, op, dp, steps) for op in (REDUCE_SCATTER, ALL_GATHER))
    for stage in rs:  # each stage's ring: ring_scores on its ops
        score = _scores(_excess(rs[stage]), _excess(ag[stage]), dp, lambda: step_s)
        if score is None or len(score) < cfg.min_steps:
            continue
        held = _held(score, cfg.min_steps)
        best = held.max(axis=0)  # [candidate]
        named: list[int] = []
        busy = [d for d, p in slow if p == stage]
        regime = None
        for victim in np.argsort(-best, kind="stable"):
            if best[victim] < cfg.ring_step_share:
                break
            # A strong link leaves some of its pattern on its neighbours' scores too, and
            # so does a slow rank.
            if any((victim - n) % dp in (1, dp - 1) for n in named + busy):
                continue
            if regime is None:
                regime = slow_regime(steps, ring_transfer(rs[stage], ag[stage]))
                if regime is None or regime.sum() < 2 * cfg.min_steps:
                    regime = False  # no slower regime, or too few steps to measure its spread
            if regime is not False and not holds_sign(score[regime, victim]):
                continue  # the noise of a ring whose links are slow alike
            named.append(int(victim))
            first, last = _window(held[:, victim] >= cfg.ring_step_share, steps,
                                  cfg.min_steps)
            found.append(Finding(
                [run.worker(int(victim), int(stage))], first, last, RootCause.NET_THROTTLE,
                confidence=float(min(1.0, 0.5 + (best[victim] - cfg.ring_step_share) * 5)),
                estimated_slowdown=max(slowdown, 1.0),
                detail={"test": "ring", "ring_step_share": float(best[victim]),
                        "ring_step_share_by_rank": [float(b) for b in best]}))
    return found


def ring_transfer(rs: np.ndarray, ag: np.ndarray) -> np.ndarray:
    """Per step, the ring's transfer time: the median rank's reduce-scatter plus all-gather
    transfer (`transfer_by_rank` grids), s."""
    with warnings.catch_warnings():  # a step no rank finished stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(rs + ag, axis=1)


def two_rank_link(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
                  slowdown: float) -> Finding | None:
    """A ring of two is one link, slowed for both ranks alike: as for a two-stage pure-PP
    job (`whatif_links.py`), the reference is the run's quietest window, and the link is
    named with both ends when its transfers (reduce-scatter plus all-gather, mean over the
    two ranks) stay `two_rank_step_share` of a step above that window's over `min_steps`
    steps. Waiting is not transfer (a slow device's peer waits before the ring, not in
    it), and one long step (a GC pause) is not a window."""
    grids = [transfer_by_rank(run.trace, op, 2, steps) for op in (REDUCE_SCATTER, ALL_GATHER)]
    if any(g is None for g in grids):
        return None
    transfer = sum(np.nansum(g, axis=1) for g in grids) / 2  # per step, mean over the two
    step_s = mean_step_time(run.trace)
    w = cfg.min_steps
    quiet = np.min(np.median(np.lib.stride_tricks.sliding_window_view(transfer, w), axis=1))
    excess = _held((transfer - quiet)[:, None], w)[:, 0] / max(step_s, 1e-12)
    if excess.max() < cfg.two_rank_step_share:
        return None
    first, last = _window(excess >= cfg.two_rank_step_share, steps, w)
    return Finding(
        [run.worker(0, 0), run.worker(1, 0)], first, last, RootCause.NET_THROTTLE,
        confidence=float(min(1.0, 0.5 + (excess.max() - cfg.two_rank_step_share) * 5)),
        estimated_slowdown=max(slowdown, 1.0),
        detail={"test": "ring", "two_rank_step_share": float(excess.max()),
                "link": "either end: a ring of two"})


def _held(score: np.ndarray, w: int) -> np.ndarray:
    """[window, column]: the least of each column over every run of w steps (one slow step
    is noise)."""
    return np.lib.stride_tricks.sliding_window_view(score, w, axis=0).min(axis=2)


def _window(flagged: np.ndarray, steps: np.ndarray, w: int) -> tuple[int, int]:
    """First and last step covered by the flagged windows of w steps."""
    where = np.flatnonzero(flagged)
    return int(steps[where[0]]), int(steps[where[-1] + w - 1])
