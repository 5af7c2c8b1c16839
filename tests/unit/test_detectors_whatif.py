"""The `whatif` detector on synthetic jobs with known stragglers and on the reference traces.

Offline the detector reads the run folder's whatif/whatif.json, so each test
first runs `stragglerlab whatif` on the trace (as the workflow does).
"""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.detectors import RootCause, Run, get_detector
from stragglerlab.analysis.detectors.whatif import Evidence, WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_stage import stage_imbalance
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import (
    SlowLink,
    SlowWorker,
    SyntheticConfig,
    synthesize_trace,
)
from tests.unit.refdata import reference
from tests.unit.whatif_runs import analysed
from tests.unit.whatif_runs import cells as _cells


def test_clean_job_has_no_findings(whatif_run):
    assert get_detector("whatif").detect(whatif_run()) == []


def test_slow_worker_is_named_as_a_worker_issue(whatif_run):
    run = whatif_run(dp_size=4, slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=1.6),))
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.SLOW_WORKER
    assert _cells(finding) == [(2, 1)]
    assert finding.ranks[0].rank == 1 * 4 + 2
    assert finding.estimated_slowdown > 1.1


def test_heavy_last_stage_is_stage_imbalance_on_every_dp_rank_of_it(whatif_run):
    run = whatif_run(pp_size=3, last_stage_factor=1.6)
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.STAGE_IMBALANCE
    assert sorted(_cells(finding)) == [(0, 2), (1, 2)]


def test_windowed_fault_sets_the_step_range_and_is_caught_online_within_two_steps(whatif_run):
    run = whatif_run(n_steps=14, slow_workers=(SlowWorker(dp_rank=1, stage=0, factor=1.8,
                                                    first_step=6),))
    (offline,) = get_detector("whatif").detect(run)
    assert (offline.first_step, offline.last_step) == (6, 13)
    (online,) = get_detector("whatif").detect_online(run)
    assert _cells(online) == [(1, 0)]
    assert 6 <= online.detected_at_step <= 8


def test_measured_gc_pauses_make_gc_the_cause(whatif_run):
    run = whatif_run()
    rng = np.random.default_rng(0)
    pauses = np.zeros(len(run.trace))
    compute = run.trace["optype"].isin(["forward-compute", "backward-compute"]).to_numpy()
    hit = rng.choice(np.flatnonzero(compute), size=12, replace=False)
    pauses[hit] = 0.05
    run.trace["gc_pause_s"] = pauses
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.GC_PAUSES
    paused = set(run.trace.loc[hit, "rank"])
    assert {r.rank for r in finding.ranks} <= paused


def test_failed_run_names_the_rank_the_runtime_lost(whatif_run):
    run = whatif_run()
    run.outcome, run.error = "failed", {"rank": 3, "kind": "hang", "message": "no progress"}
    run.last_step_by_rank = {0: 9, 1: 9, 2: 9, 3: 9}
    findings = get_detector("whatif").detect(run)
    assert [(f.root_cause, f.ranks[0].rank) for f in findings] == [(RootCause.HANG, 3)]
    online = get_detector("whatif").detect_online(run)
    assert [f.detected_at_step for f in online] == [10]


def test_a_crash_is_placed_at_the_step_after_the_last_traced_one(whatif_run):
    # Status files lag by one step (a step's end is reported with the next start); the
    # trace holds every step all ranks finished, so it decides when they say less.
    run = whatif_run()
    last = int(run.trace["step"].max())
    run.outcome, run.error = "failed", {"rank": 1, "kind": "worker-died", "message": "gone"}
    run.last_step_by_rank = {0: last - 1, 1: last - 1, 2: last - 1, 3: last - 1}
    (finding,) = get_detector("whatif").detect(run)
    assert (finding.root_cause, finding.first_step, finding.detected_at_step) == (
        RootCause.CRASH, last + 1, last + 1)


@pytest.mark.parametrize("name,cause,cells", [
    ("AR", RootCause.SLOW_WORKER, [(0, 0)]),
    ("ST", RootCause.STAGE_IMBALANCE, [(0, 3), (1, 3)]),
])
def test_reference_traces_are_diagnosed_as_in_the_paper(name, cause, cells, tmp_path, capsys):
    df, meta = read_trace(str(reference(f"trace-{name}.parquet")),
                          str(reference(f"meta-{name}.yaml")))
    findings = get_detector("whatif").detect(analysed(Run(df, meta, name), tmp_path))
    assert [(f.root_cause, sorted(_cells(f))) for f in findings] == [(cause, cells)]


def test_whatif_json_gives_the_same_findings_as_a_fresh_analysis(whatif_run):
    """The JSON round trip loses nothing the diagnosis reads."""
    run = whatif_run(dp_size=4, slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=1.6),))
    detector = get_detector("whatif")
    from_file = [f.to_dict() for f in detector.detect(run)]
    fresh = [f.to_dict() for f in detector.diagnose(run, Evidence.analyse(run))]
    assert from_file == fresh and from_file


def test_missing_whatif_json_says_to_run_whatif_first(tmp_path):
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_steps=10))
    with pytest.raises(InputError, match="run `stragglerlab whatif --run .*` first"):
        get_detector("whatif").detect(Run(df, meta, str(tmp_path)))


def test_pure_pp_stage_slowed_from_some_step_on_is_a_slow_worker_not_the_stage(whatif_run):
    # Without DP peers the two look alike per step; a partition's offset is there from the
    # first step, a device slowed mid-run is not.
    run = whatif_run(dp_size=1, n_steps=14,
               slow_workers=(SlowWorker(dp_rank=0, stage=1, factor=1.8, first_step=7),))
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.SLOW_WORKER
    assert _cells(finding) == [(0, 1)]


def test_a_pure_pp_device_slowed_early_is_not_a_heavy_stage(whatif_run):
    # Slowed from step 4 of 14, the stage is heavy in enough of both halves of the run to
    # pass rule 4's constancy test; its own compute rising after three steps says device.
    slow = (SlowWorker(dp_rank=0, stage=2, factor=1.8, first_step=4),)
    run = whatif_run(dp_size=1, pp_size=4, n_steps=14, slow_workers=slow)
    evidence = Evidence.analyse(run)
    rule4 = stage_imbalance(run, evidence.view, evidence.steps, WhatIfDetectorConfig())
    assert rule4 is not None and _cells(rule4) == [(0, 2)]  # rule 4 alone says stage
    (finding,) = get_detector("whatif").diagnose(run, evidence)
    assert finding.root_cause is RootCause.SLOW_WORKER
    assert (_cells(finding), finding.first_step, finding.last_step) == ([(0, 2)], 4, 13)
    assert finding.detail["test"] == "stage-shift"


def test_pure_pp_heavy_last_stage_from_the_start_stays_stage_imbalance(whatif_run):
    run = whatif_run(dp_size=1, pp_size=3, n_steps=14, last_stage_factor=1.6)
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.STAGE_IMBALANCE
    assert finding.detail["stage_constancy"] > 0.5


def test_gc_pauses_do_not_hide_a_slow_worker_elsewhere(whatif_run):
    run = whatif_run(dp_size=4, n_steps=12,
               slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=1.8),))
    pauses = np.zeros(len(run.trace))
    on_rank0 = (run.trace["rank"] == 0).to_numpy() & run.trace["optype"].isin(
        ["forward-compute", "backward-compute"]).to_numpy()
    pauses[np.flatnonzero(on_rank0)[::6]] = 0.05
    run.trace["gc_pause_s"] = pauses
    findings = get_detector("whatif").detect(run)
    causes = {f.root_cause: _cells(f) for f in findings}
    assert RootCause.GC_PAUSES in causes
    assert causes.get(RootCause.SLOW_WORKER) == [(2, 1)]


def test_a_slow_worker_beside_gc_on_every_rank_is_named_as_a_slow_worker(whatif_run):
    # Job-wide GC names every worker; the device rule's compute leaves GC pauses out, so
    # the slow device is a fault of its own, not GC seen again (issue 34's missed case).
    run = whatif_run(dp_size=4, n_steps=12,
                     slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=1.8),))
    compute = run.trace["optype"].isin(["forward-compute", "backward-compute"]).to_numpy()
    pauses = np.zeros(len(run.trace))
    pauses[np.flatnonzero(compute)[::5]] = 0.05  # every rank pauses
    run.trace["gc_pause_s"] = pauses
    findings = get_detector("whatif").detect(run)
    causes = {f.root_cause: _cells(f) for f in findings}
    assert len(causes[RootCause.GC_PAUSES]) == 8
    assert causes.get(RootCause.SLOW_WORKER) == [(2, 1)]


def test_mild_slow_worker_over_a_long_steady_state_is_a_worker_issue(whatif_run):
    # 1.2x on one worker of 16 with 16 microbatches: no step stands 1.15x over the best
    # worker, but the job straggles and fixing the top worker removes the slowdown
    # (M_W >= 0.5, paper §5.1), and its own compute is slow against its DP peers.
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector, WhatIfDetectorConfig

    run = whatif_run(dp_size=4, pp_size=4, n_microbatches=16, n_steps=8,
               slow_workers=(SlowWorker(dp_rank=1, stage=3, factor=1.2),))
    (finding,) = WhatIfDetector().detect(run)
    assert finding.root_cause is RootCause.SLOW_WORKER
    assert [(r.dp_rank, r.stage) for r in finding.ranks] == [(1, 3)]
    assert finding.detail["m_w"] >= 0.5  # named by the worker-issue rule, not per step
    # Without it only the device rule (its own compute, 1.2x its peers') would name it.
    (device,) = WhatIfDetector(WhatIfDetectorConfig(mw_worker=1.01)).detect(run)
    assert device.detail["test"] == "device" and _cells(device) == [(1, 3)]
    assert WhatIfDetector(WhatIfDetectorConfig(mw_worker=1.01,
                                               device_compute_ratio=1.5)).detect(run) == []


def test_mild_slow_link_is_named_beside_a_slow_worker(whatif_run):
    # A 3 ms delay on every pair one inner sender posts, from step 4 (~5 % of a step over its
    # 8 sends): too mild for the job to straggle, but nearly all its pairs are slower than
    # their reference's upper quartile.
    # A slow worker elsewhere is named by its own rule; the link beside it.
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector, WhatIfDetectorConfig

    run = whatif_run(dp_size=2, pp_size=4, n_steps=10,
               slow_workers=(SlowWorker(dp_rank=0, stage=3, factor=1.6),),
               slow_links=(SlowLink(dp_rank=1, stage=1, delay_s=0.003, first_step=4),))
    found = {f.root_cause: f for f in WhatIfDetector().detect(run)}
    assert set(found) == {RootCause.SLOW_WORKER, RootCause.NET_THROTTLE}
    assert _cells(found[RootCause.SLOW_WORKER]) == [(0, 3)]
    link = found[RootCause.NET_THROTTLE]
    assert _cells(link) == [(1, 1)]
    assert 3 <= link.first_step <= 5 and link.last_step == 9
    assert link.detail["slow_pair_share"] >= 0.85
    # Without the delay no link is named (the same noise, the same slow worker).
    plain = whatif_run(dp_size=2, pp_size=4, n_steps=10,
                 slow_workers=(SlowWorker(dp_rank=0, stage=3, factor=1.6),))
    assert [f.root_cause for f in WhatIfDetector().detect(plain)] == [RootCause.SLOW_WORKER]
    # A share no sender can reach names nothing.
    strict = WhatIfDetector(WhatIfDetectorConfig(link_pair_share=1.01)).detect(run)
    assert RootCause.NET_THROTTLE not in {f.root_cause for f in strict}


def test_a_link_throttled_both_ways_is_named_at_its_worker_in_pure_pp(whatif_run):
    # Pure PP, four stages: stage 1's veth throttled (4 ms on every pair it sends or
    # receives) from step 4. Links 0-1 and 1-2 slow, 2-3 clean: the worker test names stage
    # 1, not its neighbours. With two stages every pair passes both ends: the link is
    # named with both.
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector

    link = SlowLink(dp_rank=0, stage=1, delay_s=0.004, first_step=4, both_ways=True)
    run = whatif_run(dp_size=1, pp_size=4, n_steps=10, slow_links=(link,))
    [found] = WhatIfDetector().detect(run)
    assert found.root_cause is RootCause.NET_THROTTLE and _cells(found) == [(0, 1)]
    assert found.detail["test"] == "worker" and 3 <= found.first_step <= 5
    two = whatif_run(dp_size=1, pp_size=2, n_steps=10, slow_links=(link,))
    [found] = WhatIfDetector().detect(two)
    assert _cells(found) == [(0, 0), (0, 1)] and "link" in found.detail
    assert WhatIfDetector().detect(whatif_run(dp_size=1, pp_size=2, n_steps=10)) == []


def test_a_heavy_stage_hidden_by_a_throttled_link_is_found_without_its_steps(whatif_run):
    # Pure PP, last stage 1.8x from the start, stage 0's veth throttled (80 ms a pair) from
    # step 4: the throttled transfers enter the ideal, so the stage rule alone misses the
    # heavy stage; re-analysed on the steps before the link it is named, for the whole run.
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector

    link = SlowLink(dp_rank=0, stage=0, delay_s=0.08, first_step=4, both_ways=True)
    run = whatif_run(dp_size=1, pp_size=4, n_steps=12, last_stage_factor=1.8, slow_links=(link,))
    found = {f.root_cause: f for f in WhatIfDetector().detect(run)}
    assert set(found) == {RootCause.NET_THROTTLE, RootCause.STAGE_IMBALANCE}
    assert _cells(found[RootCause.NET_THROTTLE]) == [(0, 0)]
    stage = found[RootCause.STAGE_IMBALANCE]
    assert _cells(stage) == [(0, 3)] and (stage.first_step, stage.last_step) == (0, 11)
    assert stage.detail["without_link_steps"] == [0, 1, 2, 3]
    # The link alone: no stage is named in its clean steps.
    alone = whatif_run(dp_size=1, pp_size=4, n_steps=12, slow_links=(link,))
    assert {f.root_cause for f in WhatIfDetector().detect(alone)} == {RootCause.NET_THROTTLE}


def test_a_heavy_stage_under_a_link_for_the_whole_run_shows_in_its_compute_ops(whatif_run):
    # DP 2 x PP 4, last stage 1.6x, and a link throttled both ways from the first step: no
    # step is free of the link, so only the compute ops, which a link never lengthens,
    # can show the stage; every DP rank of it is named.
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector

    link = SlowLink(dp_rank=1, stage=1, delay_s=0.12, first_step=0, both_ways=True)
    run = whatif_run(dp_size=2, pp_size=4, n_steps=10, last_stage_factor=1.6, slow_links=(link,))
    found = {f.root_cause: f for f in WhatIfDetector().detect(run)}
    stage = found[RootCause.STAGE_IMBALANCE]
    assert _cells(stage) == [(0, 3), (1, 3)]
    assert stage.detail["stage_compute_ratio"] == pytest.approx(1.6, rel=0.1)
    assert (stage.first_step, stage.last_step) == (0, 9)


def test_stage_by_compute_needs_every_dp_rank_heavy_from_start_to_end(whatif_run):
    from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
    from stragglerlab.analysis.detectors.whatif_stage import (
        stage_by_compute,
        stage_compute_ratios,
    )

    cfg = WhatIfDetectorConfig()
    clean = whatif_run(dp_size=2, pp_size=4, jitter=0.03)
    ratios = stage_compute_ratios(clean.trace, 4)
    assert ratios.shape == (4, 10) and np.all(np.abs(ratios - 1.0) < 0.1)
    assert stage_by_compute(clean, clean.steps, cfg) is None
    # One DP rank of the stage slowed: a device, not the partition.
    one = whatif_run(dp_size=2, pp_size=4,
                     slow_workers=(SlowWorker(dp_rank=1, stage=2, factor=1.8),))
    assert stage_by_compute(one, one.steps, cfg) is None
    # The whole stage slowed, but from step 6 on: not constant, not the partition.
    late = whatif_run(dp_size=1, pp_size=4, slow_workers=(SlowWorker(dp_rank=0, stage=2, factor=1.8,
                                                               first_step=6),))
    assert stage_by_compute(late, late.steps, cfg) is None
    assert stage_compute_ratios(clean.trace[clean.trace["stage"] == 0], 1) is None


def test_one_end_per_link_prefers_the_cell_more_tests_flag():
    from stragglerlab.analysis.detectors.whatif_links import _one_end_per_link

    excess = np.array([[1.0, 0.0], [2.0, 0.0], [0.5, 0.0]])  # [stage, dp]
    # Throttle at stage 1: flagged by both tests; its upstream neighbour by its sends only.
    assert _one_end_per_link({(0, 0), (1, 0)}, {(1, 0)}, excess, False) == [[(1, 0)]]
    # In-process delay at stage 1 (its recv posts held back too): the neighbour's pairs
    # all look slow (worker test), the victim's sends do (sender test): the sender wins.
    assert _one_end_per_link({(1, 0)}, {(0, 0)}, excess, False) == [[(1, 0)]]
    # Alike: the larger transfer excess; two stages, worker test only: both ends.
    assert _one_end_per_link({(1, 0), (2, 0)}, set(), excess, False) == [[(1, 0)]]
    assert _one_end_per_link(set(), {(0, 0), (1, 0)}, excess, True) == [[(0, 0), (1, 0)]]
    # Not neighbours: each its own link.
    assert _one_end_per_link({(0, 0), (2, 0)}, set(), excess, False) == [[(0, 0)], [(2, 0)]]


def test_a_link_replaces_a_comm_excess_throttle_on_its_other_end_only():
    from stragglerlab.analysis.detectors.whatif_arbitration import merge_links
    from stragglerlab.run.findings import Finding, RankRef

    def at(cause, *cells):
        return Finding([RankRef(p * 2 + d, d, p) for d, p in cells], 3, 9, cause, 0.8)

    link = at(RootCause.NET_THROTTLE, (0, 0))
    neighbour = at(RootCause.NET_THROTTLE, (0, 1))   # same DP rank, next stage
    elsewhere = at(RootCause.NET_THROTTLE, (1, 1))   # another DP rank: its own link
    slow = at(RootCause.SLOW_WORKER, (0, 1))         # a slow device there stays
    assert merge_links([neighbour, elsewhere, slow], [link]) == [elsewhere, slow, link]
    # A link on a rank another rule already named is not named twice.
    gc = at(RootCause.GC_PAUSES, (0, 0))
    assert merge_links([gc], [link]) == [gc]
    # A heavy stage lengthens compute, not transfers: a link on one of its ranks is a
    # fault of its own (dev seed 19: a throttle on the heavy last stage was dropped).
    heavy = at(RootCause.STAGE_IMBALANCE, (0, 0), (1, 0))
    assert merge_links([heavy], [link]) == [heavy, link]
    assert merge_links([], []) == []
