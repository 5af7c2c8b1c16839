"""The `whatif` detector's slow links in pure DP (analysis/detectors/whatif_ring.py)."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.detectors import RootCause, Run


def _cells(finding) -> list[tuple[int, int]]:
    return [(r.dp_rank, r.stage) for r in finding.ranks]


def _ring_run(dp: int, victim: int | None, lateness_s: float = 0.02, first: int = 3,
              n_steps: int = 8, seed: int = 0, signs=None, slowed_s: float = 0.0) -> Run:
    """Pure-DP trace of a 0.2 s step: compute, then a reduce-scatter and an all-gather that
    every rank enters together. With a victim, from step `first` on, the ring pattern of a
    throttled link: the rank before it leaves the reduce-scatter late and the one after it
    early, and the other way round in the all-gather (times `signs[step]`, default 1).
    From `first` on every rank's transfers also take `slowed_s` longer (a ring slowed
    alike). Every rank's exit also jitters."""
    import pandas as pd

    from stragglerlab.trace.meta import JobMeta

    rng = np.random.default_rng(seed)
    rows = []
    for step in range(n_steps):
        t0 = step * 0.2
        for d in range(dp):
            late = {"grads-reduce-scatter": 0.0, "params-all-gather": 0.0}
            if victim is not None and step >= first:
                sign = 1.0 if signs is None else signs[step]
                late["grads-reduce-scatter"] = sign * lateness_s * (
                    (d == (victim - 1) % dp) - (d == (victim + 1) % dp))
                late["params-all-gather"] = sign * lateness_s * (
                    (d == (victim + 1) % dp) - (d == (victim - 1) % dp))
            rows.append((d, d, 0, step, "forward-compute", t0, 0.1))
            for k, op in enumerate(("grads-reduce-scatter", "params-all-gather")):
                start = t0 + 0.1 + 0.04 * k
                slowed = slowed_s if step >= first else 0.0
                rows.append((d, d, 0, step, op, start,
                             0.03 + slowed + late[op] * 0.5 + rng.normal(0, 0.001)))
    df = pd.DataFrame(rows, columns=["rank", "dp_rank", "stage", "step", "optype",
                                     "start_ts", "duration"])
    return Run(df, JobMeta(dp_size=dp, pp_size=1), "synthetic-ring")


def test_a_throttled_ring_link_in_pure_dp_is_named_at_its_rank_and_nowhere_else():
    from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
    from stragglerlab.analysis.detectors.whatif_ring import ring_links
    from stragglerlab.analysis.ring_order import ring_scores

    cfg = WhatIfDetectorConfig()
    for dp, victim in ((4, 2), (4, 0), (3, 1), (6, 5)):
        run = _ring_run(dp, victim)
        steps = np.arange(8)
        found = ring_links(run, steps, cfg, slowdown=1.0)
        assert len(found) == 1 and found[0].root_cause is RootCause.NET_THROTTLE
        assert _cells(found[0]) == [(victim, 0)]
        assert (found[0].first_step, found[0].last_step) == (3, 7)
        # Its ring neighbours' signed excess: 4 x 10 ms over a 0.2 s step, the others ~0.
        assert found[0].detail["ring_step_share"] == pytest.approx(0.2, abs=0.03)
    # No link, or a ring of two (each rank is both neighbours of the other): nothing.
    assert ring_links(_ring_run(4, None), np.arange(8), cfg, 1.0) == []
    assert ring_scores(_ring_run(2, 1).trace, 2, np.arange(8), 0.2) is None
    # Two slow steps are not a window of three.
    assert ring_links(_ring_run(4, 2, first=6), np.arange(8), cfg, 1.0) == []


def test_a_ring_slowed_alike_names_no_link_though_its_noise_holds_a_sign_for_a_while():
    """Every link of a DP 4 ring slowed alike (ranks 1 and 3 throttled both ways): the
    ring score is noise at the scale of the slowed transfers. Here it holds rank 2's sign
    over three steps (a window the rule would name) and then flips: over the steps the
    ring is slow its mean does not stand over its spread, so no link is placed. The
    same pattern held over every slow step is a link, named."""
    from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
    from stragglerlab.analysis.detectors.whatif_ring import ring_links

    cfg = WhatIfDetectorConfig()
    steps = np.arange(12)
    flips = [1, 1, 1, 1, 1, 1, -1, -1, 1, -1, -1, 1]
    alike = _ring_run(4, 2, n_steps=12, signs=flips, slowed_s=0.2)
    assert ring_links(alike, steps, cfg, 1.0) == []
    held = _ring_run(4, 2, n_steps=12, slowed_s=0.2)
    (found,) = ring_links(held, steps, cfg, 1.0)
    assert _cells(found) == [(2, 0)] and (found.first_step, found.last_step) == (3, 11)
    # Transfers that did not change regime: no scale of slowed transfers, no such test
    # (the threshold holds the score to clean noise, as it always did).
    assert len(ring_links(_ring_run(4, 2, n_steps=12, signs=flips), steps, cfg, 1.0)) == 1


def test_holds_sign_and_slow_regime():
    from stragglerlab.analysis.over_time import holds_sign, slow_regime

    assert holds_sign([0.24, 0.32, 0.24, 0.24, 0.17, 0.16])       # a link: 10 SEs
    assert not holds_sign([0.01, 0.05, 0.06, 0.05, -0.02, 0.05])   # noise: 2.7 SEs
    assert holds_sign([0.1])                    # one step: no spread to hold it to
    from stragglerlab.analysis.over_time import sign_t

    assert sign_t([0.1]) is None and sign_t([0.1, 0.1]) == np.inf
    assert sign_t([0.24, 0.32, 0.24, 0.24, 0.17, 0.16]) == pytest.approx(10.0, abs=0.5)
    assert holds_sign([0.1, 0.1]) and not holds_sign([0.0, 0.0])
    t = np.array([0.02, 0.02, 0.03, 1.0, 1.1, 0.9, 1.0, 0.02])
    assert slow_regime(np.arange(8), t).tolist() == [False] * 3 + [True] * 4 + [False]
    assert slow_regime(np.arange(8), np.full(8, 0.5)) is None        # no change
    assert slow_regime(np.arange(8), [1.0] * 4 + [1.3] * 4) is None      # under 1.5x
    assert slow_regime(np.arange(4), [0.0, 1.0, 1.0, 1.0]) is None   # not positive


def test_each_stage_has_its_own_ring_and_two_links_far_apart_are_both_named():
    import pandas as pd

    from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
    from stragglerlab.analysis.detectors.whatif_ring import ring_links
    from stragglerlab.trace.meta import JobMeta

    cfg = WhatIfDetectorConfig()
    # DP 4 x PP 2: stage 1's ring points at DP rank 3, stage 0's ring is clean.
    clean, slow = _ring_run(4, None, seed=1).trace, _ring_run(4, 3).trace.assign(stage=1)
    staged = Run(pd.concat([clean, slow], ignore_index=True), JobMeta(dp_size=4, pp_size=2),
                 "synthetic-staged-ring")
    found = ring_links(staged, np.arange(8), cfg, 1.0)
    assert [_cells(f) for f in found] == [[(3, 1)]]
    # Two throttled ranks that are not ring neighbours (DP 6: ranks 1 and 4) are two links.
    two = _ring_run(6, 1).trace
    other = _ring_run(6, 4, seed=2).trace
    links = two["optype"].isin(["grads-reduce-scatter", "params-all-gather"])
    two.loc[links, "duration"] += other.loc[links, "duration"] - 0.03
    found = ring_links(Run(two, JobMeta(dp_size=6, pp_size=1), "two"), np.arange(8), cfg, 1.0)
    assert sorted(_cells(f)[0] for f in found) == [(1, 0), (4, 0)]
    # With stages, a ring of two is left to the P2P tests.
    pair = _ring_run(2, None).trace
    assert ring_links(Run(pair, JobMeta(dp_size=2, pp_size=2), "pair"), np.arange(8),
                      cfg, 1.0) == []


def test_a_slow_ranks_ring_neighbours_are_not_named():
    from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
    from stragglerlab.analysis.detectors.whatif_ring import ring_links

    cfg = WhatIfDetectorConfig()
    run = _ring_run(4, 2)  # the pattern points at rank 2
    assert ring_links(run, np.arange(8), cfg, 1.0, slow={(1, 0)}) == []  # 1 is slow
    (found,) = ring_links(run, np.arange(8), cfg, 1.0, slow={(0, 0)})     # 0 is not beside 2
    assert _cells(found) == [(2, 0)]
    assert len(ring_links(run, np.arange(8), cfg, 1.0, slow={(1, 1)})) == 1  # other stage


def test_a_ring_link_replaces_a_comm_excess_throttle_on_a_ring_neighbour():
    from stragglerlab.analysis.detectors.whatif_arbitration import merge_links
    from stragglerlab.run.findings import Finding, RankRef

    def at(cause, d, **detail):
        return Finding([RankRef(d, d, 0)], 3, 9, cause, 0.8, detail=detail)

    ring = at(RootCause.NET_THROTTLE, 0, test="ring")
    before = at(RootCause.NET_THROTTLE, 3)        # rank 0's neighbour on a ring of four
    across = at(RootCause.NET_THROTTLE, 2)        # not a neighbour: its own finding
    assert merge_links([before, across], [], [ring], dp=4) == [across, ring]


def test_the_ring_says_which_end_of_a_pipeline_link_is_throttled():
    from stragglerlab.analysis.detectors.whatif_arbitration import prefer_ring_ends
    from stragglerlab.run.findings import Finding, RankRef

    def at(d, p, **detail):
        return Finding([RankRef(d * 2 + p, d, p)], 9, 13, RootCause.NET_THROTTLE, 0.8,
                       detail=detail)

    ring = [at(0, 1, test="ring")]                # stage 1's ring points at (0, 1)
    p2p_other_end, p2p_elsewhere = at(0, 0, test="worker"), at(2, 0, test="sender")
    assert prefer_ring_ends([p2p_other_end, p2p_elsewhere], ring, dp=4) == [p2p_elsewhere]
    # A DP-2 stage has no ring to say it: the P2P finding stands.
    assert prefer_ring_ends([p2p_other_end], ring, dp=2) == [p2p_other_end]


def test_a_ring_of_two_names_its_slow_link_with_both_ends():
    from stragglerlab.analysis.detectors.whatif import WhatIfDetectorConfig
    from stragglerlab.analysis.detectors.whatif_ring import ring_links

    cfg = WhatIfDetectorConfig()
    # Both ranks' transfers 60 ms longer from step 3 (a 0.2 s step): one link, both ends.
    run = _ring_run(2, None)
    slow = run.trace["optype"].isin(["grads-reduce-scatter", "params-all-gather"]) \
        & (run.trace["step"] >= 3)
    run.trace.loc[slow, "duration"] += 0.03
    (found,) = ring_links(run, np.arange(8), cfg, 1.0)
    assert _cells(found) == [(0, 0), (1, 0)]
    assert (found.first_step, found.last_step) == (3, 7) and "link" in found.detail
    # The same noise without the link, or one slow step (a GC pause in the ring): nothing.
    assert ring_links(_ring_run(2, None), np.arange(8), cfg, 1.0) == []
    once = _ring_run(2, None)
    once.trace.loc[once.trace["optype"].eq("params-all-gather") & once.trace["step"].eq(5),
                   "duration"] += 0.1
    assert ring_links(once, np.arange(8), cfg, 1.0) == []


def test_a_link_named_with_both_ends_gives_way_to_a_rule_that_chose_one():
    from stragglerlab.analysis.detectors.whatif_arbitration import merge_links
    from stragglerlab.run.findings import Finding, RankRef

    both = Finding([RankRef(0, 0, 0), RankRef(1, 1, 0)], 5, 9, RootCause.NET_THROTTLE, 0.8,
                   detail={"test": "ring", "link": "either end: a ring of two"})
    chose = Finding([RankRef(1, 1, 0)], 5, 9, RootCause.NET_THROTTLE, 0.8)
    slow = Finding([RankRef(1, 1, 0)], 5, 9, RootCause.SLOW_WORKER, 0.8)
    assert merge_links([chose], [], [both], dp=2) == [chose]
    # A slow device on one end is another fault: the link is still named.
    assert merge_links([slow], [], [both], dp=2) == [slow, both]


def test_stage_transfers_are_each_stages_transfer_by_rank():
    """The one-pass transfers of every stage's ring give transfer_by_rank's numbers on that
    stage's ops, bit for bit (the live monitor's window at 1,024 workers reads them so)."""
    from stragglerlab.analysis.ring_order import (
        ALL_GATHER,
        REDUCE_SCATTER,
        stage_transfers,
        transfer_by_rank,
    )
    from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace

    traces = [_ring_run(5, 2, n_steps=6).trace]
    for dp, pp in ((4, 3), (3, 2)):
        df, _ = synthesize_trace(SyntheticConfig(
            dp_size=dp, pp_size=pp, n_microbatches=4, n_steps=6,
            slow_workers=(SlowWorker(1, pp - 1, 1.5, 2),)))
        traces.append(df)
        shuffled = df.sample(frac=1.0, random_state=1)  # rows in no group order (Kahan sums)
        traces.append(shuffled)
    for trace in traces:
        dp = int(trace["dp_rank"].max()) + 1
        for steps in (np.arange(6), np.arange(1, 5), np.array([0, 2, 3])):
            for op in (REDUCE_SCATTER, ALL_GATHER, "forward-compute", "gc-none"):
                got = stage_transfers(trace, op, dp, steps)
                for stage, ops in trace.groupby("stage", sort=True):
                    want = transfer_by_rank(ops, op, dp, steps)
                    if want is None:
                        assert got[stage] is None
                    else:
                        assert got[stage].tobytes() == want.tobytes()
                assert list(got) == sorted(trace["stage"].unique().tolist())


def test_ring_sign_reads_the_recorded_rings():
    """benchmarks/ring_sign.py on the recorded runs: one throttled link stands many standard
    errors over zero on its victim; two links that slow the whole ring leave no rank near
    the rule's 4."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    data = root / "tests" / "data" / "job-wide"
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "ring_sign.py"),
                          str(data / "shared-ring-dp4"), str(data / "shared-ring-dp4-two")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    t = [[float(x) for x in re.findall(r"t ([+-][\d.]+|[+-]inf)", line)] for line in out]
    assert "regime 6-11" in out[0] and "regime 6-11" in out[1]
    # (in a ring of 4 the score is antisymmetric: rank 0's t is the victim's, negated)
    assert t[0][2] > 4 and max(x for i, x in enumerate(t[0]) if i != 2) < 4
    assert max(abs(x) for x in t[1]) < 2
