"""Slow links for the `whatif` detector, localized from P2P pair latencies (any layout with PP).

A slow link (added latency, a throttled veth) delays every pair its rank sends,
so over a few steps nearly all of that sender's pairs are slower than the upper
quartile of the other senders' pairs in its place, and their median stands out
of those pairs' timing noise.
A GC pause or a scheduling hiccup slows a pair now and then, not nearly all of
them; a slow device is named by its own compute before this rule is read. The
reference pairs are those whose receiver was already waiting (then the latency
is the whole transfer); see `stragglerlab.p2p_pairs`.

It runs after every other rule, beside their findings: a slow link is often
one fault of several (a slow worker plus a delayed link), and a mild one does
not make the job straggle. Pairs to a worker another rule named slow (a slow
device, GC pauses) do not count against their sender: a slow receiver completes
its recvs late by itself. Ranks another rule named are not named again
(`merge_links`), except that a `net-throttle` named from comm excess on the
other end of a slow link gives way to the link's sender. Two
senders flagged that send to each other (a link throttled both ways slows the
victim's sends and its neighbour's sends to it) are one link: the rank whose
comm ops collect more transfer excess over the run (whatif.json) is named.

Thresholds (`WhatIfDetectorConfig.link_pair_share`, `link_excess_iqr`,
`link_min_pairs`, `link_step_share`) were set on dev; their docstrings give the
numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run
from stragglerlab.analysis.detectors.signatures import step_time_total
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.p2p_pairs import p2p_pair_latency, sender_window_signals


def merge_links(found: list[Finding], links: list[Finding]) -> list[Finding]:
    """The other rules' findings plus the slow links on ranks they did not name.

    A `net-throttle` another rule named from comm excess on a P2P neighbour of a slow
    link (same DP rank, next or previous stage) is that link seen from its other end (a
    pair's excess lands on both ends): the link's own finding replaces it.
    """
    cells = {(r.dp_rank, r.stage) for f in links for r in f.ranks}
    ends = {(d, p + o) for d, p in cells for o in (-1, 1)} - cells

    def other_end(f: Finding) -> bool:
        return f.root_cause is RootCause.NET_THROTTLE and bool(f.ranks) and all(
            (r.dp_rank, r.stage) in ends for r in f.ranks)

    kept = [f for f in found if not other_end(f)]
    named = {(r.dp_rank, r.stage) for f in kept for r in f.ranks}
    return kept + [f for f in links if (f.ranks[0].dp_rank, f.ranks[0].stage) not in named]


def slow_links(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
               comm_excess: np.ndarray, slowdown: float,
               found: list[Finding]) -> list[Finding]:
    """Findings for senders whose pairs are slow over a window (see the module docstring).

    comm_excess: per worker [stage, dp] transfer excess over the run (whatif.json), s.
    found: the other rules' findings; pairs to a worker they named slow (a slow device,
    GC pauses) do not count as their sender's own: a slow receiver completes its recvs
    late by itself.
    """
    pp, dp = run.meta.pp_size, run.meta.dp_size
    if pp < 2 or len(steps) < cfg.min_steps:
        return []
    pairs = p2p_pair_latency(run.trace)
    slow = {(r.dp_rank, r.stage) for f in found for r in f.ranks
            if f.root_cause in (RootCause.SLOW_WORKER, RootCause.GC_PAUSES)}
    own_ok = None
    if slow:  # a slow receiver's pairs say nothing of its sender's link (reference only)
        receiver = pairs["sender_stage"] + np.where(pairs["direction"] == "forward", 1, -1)
        own_ok = pd.Series(~pd.MultiIndex.from_arrays([pairs["dp_rank"], receiver]).isin(
            pd.MultiIndex.from_tuples(sorted(slow))), index=pairs.index)
    sig = sender_window_signals(pairs, pp, dp, steps, cfg.min_steps, own_ok)
    share = sig.share
    # What the delay costs: its excess on every pair the sender posts in a step, as a share
    # of the step time (a slow link on a trace where P2P is a sliver of the step is noise).
    sends = pairs[pairs["step"].isin(steps)].groupby(["sender_stage", "dp_rank"]).size()
    per_step = np.zeros((pp, dp))
    per_step[sends.index.get_level_values(0), sends.index.get_level_values(1)] = \
        sends.to_numpy() / len(steps)
    step_s = step_time_total(run.trace) / max(run.trace["step"].nunique(), 1)
    cost = sig.excess_s * per_step[:, :, None] / max(step_s, 1e-12)
    with np.errstate(invalid="ignore"):
        flagged = (share >= cfg.link_pair_share) & (sig.excess_iqr >= cfg.link_excess_iqr) \
            & (sig.count >= cfg.link_min_pairs) & (cost >= cfg.link_step_share)
    senders = {(int(p), int(d)) for p, d in zip(*np.nonzero(flagged.any(axis=2)))}
    # A link slowed both ways flags the victim and the neighbour sending to it: keep one.
    for p, d in sorted(senders):
        for q in (p - 1, p + 1):
            if (p, d) in senders and (q, d) in senders:
                weaker = min((p, d), (q, d), key=lambda w: comm_excess[w])
                senders.discard(weaker)
    links = []
    for p, d in sorted(senders):
        windows = np.flatnonzero(flagged[p, d])
        first, last = int(windows[0]), int(windows[-1]) + cfg.min_steps - 1
        best = int(windows[np.argmax(share[p, d, windows])])
        links.append(Finding(
            [run.worker(d, p)], int(steps[first]), int(steps[last]), RootCause.NET_THROTTLE,
            confidence=float(min(1.0, 0.5 + (share[p, d, best] - cfg.link_pair_share) * 3)),
            estimated_slowdown=max(slowdown, 1.0),
            detail={"slow_pair_share": float(share[p, d, best]),
                    "pair_excess_iqr": float(sig.excess_iqr[p, d, best]),
                    "step_share": float(cost[p, d, best])}))
    return links
