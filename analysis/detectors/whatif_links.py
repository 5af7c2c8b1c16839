"""Slow links for the `whatif` detector, localized from P2P pair latencies (any layout with PP).

Two tests over windows of a few steps (`stragglerlab.method.p2p_pairs`), each against
reference pairs whose receiver was already waiting (then the latency is the
whole transfer):

* sender: a delayed sender delays every pair it posts, so nearly all of its pairs
  are slower than the upper quartile of the other senders' pairs in its place;
* worker: a veth throttled both ways slows every pair the worker sends or
  receives, while each neighbour also has a clean link. Its reference is its DP
  peers' pairs, or in pure PP the pairs that touch neither end; with two stages and
  no DP (every pair passes both ends) the run's quietest window, and the link is
  named with both ends, since no trace can tell them apart.

A pair whose receiver came late counts only if it is slow all the same: a late
receiver hides a delay (it does not add one). A GC pause or a scheduling hiccup
slows a pair now and then, not nearly all of them; a slow device is named by its
own compute before this rule is read.

It runs after every other rule, beside their findings: a slow link is often
one fault of several (a slow worker plus a delayed link), and a mild one does
not make the job straggle. Pairs to a worker another rule named slow (a slow
device, GC pauses) do not count against their sender: a slow receiver completes
its recvs late by itself. Ranks another rule named are not named again
(`whatif_arbitration.merge_links`), except that a `net-throttle` named from comm excess on the
other end of a slow link gives way to the link's sender. Two neighbours flagged
are one link (`_one_end_per_link` says which end is named).

Thresholds (`WhatIfDetectorConfig.link_pair_share`, `link_excess_iqr`,
`link_min_pairs`, `link_step_share`), the same for both tests, were set on dev;
their docstrings give the numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run, named_cells
from stragglerlab.analysis.detectors.signatures import mean_step_time
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.method.p2p_pairs import (
    LinkSignals,
    PairArrays,
    p2p_pair_latency,
    reference_quartiles,
    sender_window_signals,
    worker_window_signals,
)


def slowed_workers(found: list[Finding]) -> set[tuple[int, int]]:
    """(dp_rank, stage) of the workers a finding names a slow device or GC victim: their
    own slowness shows in the links they touch (a slow receiver completes its recvs late,
    a slow ring member reduces late), which says nothing of a link."""
    return named_cells([f for f in found
                        if f.root_cause in (RootCause.SLOW_WORKER, RootCause.GC_PAUSES)])


def pipeline_ends(cells: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Same DP rank, next or previous stage."""
    return {(d, p + o) for d, p in cells for o in (-1, 1)}


def ring_ends(cells: set[tuple[int, int]], dp: int) -> set[tuple[int, int]]:
    """Same stage, the DP ranks either side (mod `dp`)."""
    return {((d + o) % dp, p) for d, p in cells for o in (-1, 1)}


def _in_cells(dp_rank: np.ndarray, stage: np.ndarray,
              cells: list[tuple[int, int]]) -> np.ndarray:
    """Per pair end: whether its (dp_rank, stage) is one of `cells` (a handful)."""
    hit = np.zeros(len(dp_rank), dtype=bool)
    for d, p in cells:
        hit |= (dp_rank == d) & (stage == p)
    return hit


def slow_links(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
               comm_excess: np.ndarray, slowdown: float,
               slowed: set[tuple[int, int]], pairs: pd.DataFrame | None = None
               ) -> list[Finding]:
    """Findings for senders whose pairs are slow over a window (see the module docstring).

    comm_excess: per worker [stage, dp] transfer excess over the run (whatif.json), s.
    slowed: (dp_rank, stage) of the workers the other rules named slow (a slow device, GC
    pauses: `slowed_workers`); pairs to them do not count as their sender's own: a slow
    receiver completes its recvs late by itself. pairs: `p2p_pair_latency(run.trace)`
    when the caller has it.
    """
    pp, dp = run.meta.pp_size, run.meta.dp_size
    if pp < 2 or len(steps) < cfg.min_steps:
        return []
    # The pairs' columns as arrays, once for both tests, and masks over every pair rather
    # than a filtered copy (the signals keep to `steps` too): the monitor runs this on
    # every window.
    arrays = PairArrays.of(p2p_pair_latency(run.trace) if pairs is None else pairs)
    in_steps = np.isin(arrays.step, steps)
    dp_rank, sender, receiver = arrays.dp_rank, arrays.sender, arrays.receiver
    slow = sorted(slowed)
    # A slow receiver completes its recvs late by itself: its pairs say nothing of a link
    # (reference only), for its sender and for the worker test alike.
    to_slow, from_slow = _in_cells(dp_rank, receiver, slow), _in_cells(dp_rank, sender, slow)
    step_s = mean_step_time(run.trace)

    def flags(sig: LinkSignals, ends: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(cost, flagged) per [stage, dp, window]. Cost: the excess on every pair the
        owner has in a step, as a share of the step (P2P that is a sliver of the step is
        noise)."""
        per_step = np.zeros((pp, dp))
        for stage in ends:
            n = np.zeros((pp, dp), dtype=np.int64)
            np.add.at(n, (stage[in_steps], dp_rank[in_steps]), 1)
            per_step += n / len(steps)  # a cell without pairs adds 0.0: unchanged
        cost = sig.excess_s * per_step[:, :, None] / max(step_s, 1e-12)
        with np.errstate(invalid="ignore"):
            return cost, (sig.share >= cfg.link_pair_share) & (
                sig.excess_iqr >= cfg.link_excess_iqr) & (sig.count >= cfg.link_min_pairs) \
                & (cost >= cfg.link_step_share)

    # Both tests hold a pair to the same DP peers' pairs: their quartiles, computed once.
    reference = reference_quartiles(arrays, steps, pp, dp) if dp > 1 else None
    by_sender = sender_window_signals(arrays, pp, dp, steps, cfg.min_steps, ~to_slow,
                                      informative=True, reference=reference)
    by_worker = worker_window_signals(arrays, pp, dp, steps, cfg.min_steps,
                                      ~(to_slow | from_slow), informative=True,
                                      reference=reference)
    tests = {"sender": (by_sender, *flags(by_sender, [sender])),
             "worker": (by_worker, *flags(by_worker, [sender, receiver]))}
    flagged = {name: {(int(p), int(d)) for p, d in zip(*np.nonzero(f.any(axis=2)))}
               for name, (_, _, f) in tests.items()}
    keep = _one_end_per_link(flagged["sender"], flagged["worker"], comm_excess,
                             two_ends=dp == 1 and pp == 2)
    links = []
    for cells in keep:
        p, d = cells[0]
        test = "worker" if (p, d) in flagged["worker"] else "sender"
        sig, cost, flag = tests[test]
        windows = np.flatnonzero(flag[p, d])
        first, last = int(windows[0]), int(windows[-1]) + cfg.min_steps - 1
        best = int(windows[np.argmax(sig.share[p, d, windows])])
        links.append(Finding(
            [run.worker(dd, pp_) for pp_, dd in cells], int(steps[first]), int(steps[last]),
            RootCause.NET_THROTTLE,
            confidence=float(min(1.0, 0.5 + (sig.share[p, d, best] - cfg.link_pair_share) * 3)),
            estimated_slowdown=max(slowdown, 1.0),
            detail={"test": test, "slow_pair_share": float(sig.share[p, d, best]),
                    "pair_excess_iqr": float(sig.excess_iqr[p, d, best]),
                    "step_share": float(cost[p, d, best]),
                    **({"link": "either end: every pair passes both"} if len(cells) > 1
                       else {})}))
    return links


def _one_end_per_link(by_sender: set[tuple[int, int]], by_worker: set[tuple[int, int]],
                      comm_excess: np.ndarray, two_ends: bool) -> list[list[tuple[int, int]]]:
    """Flagged (stage, dp) cells, one per slow link: a link slowed both ways flags its victim
    and the neighbour that shares it. The victim is the one more tests flagged (a throttled
    worker's sends and all its pairs are slow; its neighbour's other link is clean); then the
    one whose own sends are slow (an in-process delay also holds back the victim's recv
    posts, so its neighbour's pairs can all look slow while the victim's other link is
    not); then the one whose comm ops collect more transfer excess (whatif.json). In a
    two-stage pure-PP job (two_ends) every pair passes both ends: a link only the worker
    test flagged is named with both."""
    cells = by_sender | by_worker

    def rank(c: tuple[int, int]) -> tuple[int, int, float]:
        return (int(c in by_sender) + int(c in by_worker), int(c in by_sender),
                float(comm_excess[c]))

    joint = []
    for p, d in sorted(cells):
        a, b = (p, d), (p + 1, d)
        if a not in cells or b not in cells:
            continue
        if two_ends and not {a, b} & by_sender:
            cells -= {a, b}
            joint.append([a, b])
        else:
            cells.discard(min(a, b, key=rank))
    return joint + [[c] for c in sorted(cells)]
