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

as a share of the step (`analysis/ring_order.py` computes it). A rank whose
score stays at least `ring_step_share` over `min_steps` consecutive steps is
named `net-throttle`, unless another
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

import numpy as np

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run
from stragglerlab.analysis.detectors.signatures import mean_step_time
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.over_time import holds_sign, slow_regime
from stragglerlab.analysis.ring_order import (
    ALL_GATHER,
    MIN_RING,
    REDUCE_SCATTER,
    excess_grid,
    neighbour_scores,
    ring_transfer,
    stage_transfers,
    transfer_by_rank,
)


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
        score = neighbour_scores(excess_grid(rs[stage]), excess_grid(ag[stage]), dp,
                                 lambda: step_s)
        if score is None or len(score) < cfg.min_steps:
            continue
        held = _held(score, cfg.min_steps)
        best = held.max(axis=0)  # [candidate]
        named: list[int] = []
        busy = [d for d, p in slow if p == stage]
        regime = sign_test_steps(rs[stage], ag[stage], steps, cfg.min_steps) \
            if best.max() >= cfg.ring_step_share else None
        for victim in np.argsort(-best, kind="stable"):
            if best[victim] < cfg.ring_step_share:
                break
            # A strong link leaves some of its pattern on its neighbours' scores too, and
            # so does a slow rank.
            if any((victim - n) % dp in (1, dp - 1) for n in named + busy):
                continue
            if regime is not None and not holds_sign(score[regime, victim]):
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


def sign_test_steps(rs: np.ndarray, ag: np.ndarray, steps: np.ndarray,
                    min_steps: int) -> np.ndarray | None:
    """Mask over the steps: the ring's slower regime of transfers (`ring_transfer`'s
    `over_time.slow_regime`), the steps a candidate's sign is held over; None without one,
    or with fewer than 2 x min_steps steps in it (too few to measure the score's spread)."""
    regime = slow_regime(steps, ring_transfer(rs, ag))
    return regime if regime is not None and regime.sum() >= 2 * min_steps else None


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
