"""The `whatif` detector's quiet-link rule (whatif_rules/quiet_link.py): one rank's comm ops
collect clearly the most excess, its compute is not slow -> `net-throttle` on it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_rules.quiet_link import rule
from stragglerlab.run.findings import RankRef, RootCause


def _signals(excess: np.ndarray, job_s: float, slow_from: int | None = None
             ) -> SimpleNamespace:
    """Steps 3-7 of 1 s: each rank computes 0.5 s, then sends for 0.1 s; from `slow_from`
    on, every rank's send takes 0.4 s (a link the job waits on)."""
    pp, dp = excess.shape
    rows = []
    for step in range(3, 8):
        for rank in range(pp * dp):
            send = 0.4 if slow_from is not None and step >= slow_from else 0.1
            rows += [(step, rank, "forward-compute", step + 0.0, 0.5),
                     (step, rank, "forward-send", step + 0.5, send)]
    trace = pd.DataFrame(rows, columns=["step", "rank", "optype", "start_ts", "duration"])
    run = SimpleNamespace(trace=trace, meta=SimpleNamespace(dp_size=dp, pp_size=pp),
                          worker=lambda d, p: RankRef(rank=p * dp + d, dp_rank=d, stage=p))
    return SimpleNamespace(config=WhatIfDetectorConfig(), run=run, steps=np.arange(3, 8),
                           evidence=SimpleNamespace(comm_excess_by_worker=excess),
                           compute_over_peers=None, view=SimpleNamespace(slowdown=job_s))


def test_a_link_collecting_the_excess_is_named_with_an_estimate_of_at_least_one():
    excess = np.array([[0.05], [0.05], [2.0], [0.05]])  # pure PP 4: stage 2's link
    (f,) = rule(_signals(excess, job_s=0.91), Board())
    assert f.root_cause is RootCause.NET_THROTTLE
    assert [(r.dp_rank, r.stage) for r in f.ranks] == [(0, 2)]
    # a throttle over most of the run is its own median, and the job's S read 0.91
    assert f.estimated_slowdown == 1.0
    (f,) = rule(_signals(excess, job_s=1.3), Board())
    assert f.estimated_slowdown == 1.3


def test_no_link_standing_out_names_nothing():
    assert rule(_signals(np.full((4, 1), 0.3), job_s=1.2), Board()) == []


def test_its_window_is_the_ranks_slower_regime_of_communication():
    excess = np.array([[0.05], [0.05], [2.0], [0.05]])
    (f,) = rule(_signals(excess, job_s=1.0, slow_from=5), Board())
    assert (f.first_step, f.last_step) == (5, 7)
    (f,) = rule(_signals(excess, job_s=1.0), Board())  # no change over time: the run
    assert (f.first_step, f.last_step) == (3, 7)
