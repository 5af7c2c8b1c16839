"""The `whatif` detector on synthetic jobs with known stragglers and on the reference traces."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.detectors import RootCause, Run, get_detector
from stragglerlab.trace_io import read_trace
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace
from tests.unit.refdata import reference


def _run(**kwargs) -> Run:
    cfg = SyntheticConfig(**{"dp_size": 2, "pp_size": 2, "n_steps": 10, **kwargs})
    df, meta = synthesize_trace(cfg)
    return Run(df, meta, "synthetic")


def _cells(finding) -> list[tuple[int, int]]:
    return [(r.dp_rank, r.stage) for r in finding.ranks]


def test_clean_job_has_no_findings():
    assert get_detector("whatif").detect(_run()) == []


def test_slow_worker_is_named_as_a_worker_issue():
    run = _run(dp_size=4, slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=1.6),))
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.WORKER
    assert _cells(finding) == [(2, 1)]
    assert finding.ranks[0].rank == 1 * 4 + 2
    assert finding.estimated_slowdown > 1.1


def test_heavy_last_stage_is_stage_imbalance_on_every_dp_rank_of_it():
    run = _run(pp_size=3, last_stage_factor=1.6)
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.STAGE_IMBALANCE
    assert sorted(_cells(finding)) == [(0, 2), (1, 2)]


def test_windowed_fault_sets_the_step_range_and_is_caught_online_within_two_steps():
    run = _run(n_steps=14, slow_workers=(SlowWorker(dp_rank=1, stage=0, factor=1.8,
                                                    first_step=6),))
    (offline,) = get_detector("whatif").detect(run)
    assert (offline.first_step, offline.last_step) == (6, 13)
    (online,) = get_detector("whatif").detect_online(run)
    assert _cells(online) == [(1, 0)]
    assert 6 <= online.detected_at_step <= 8


def test_measured_gc_pauses_make_gc_the_cause():
    run = _run()
    rng = np.random.default_rng(0)
    pauses = np.zeros(len(run.trace))
    compute = run.trace["optype"].isin(["forward-compute", "backward-compute"]).to_numpy()
    hit = rng.choice(np.flatnonzero(compute), size=12, replace=False)
    pauses[hit] = 0.05
    run.trace["gc_pause_s"] = pauses
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.GC
    paused = set(run.trace.loc[hit, "rank"])
    assert {r.rank for r in finding.ranks} <= paused


def test_failed_run_names_the_rank_the_runtime_lost():
    run = _run()
    run.outcome, run.error = "failed", {"rank": 3, "kind": "hang", "message": "no progress"}
    run.last_step_by_rank = {0: 9, 1: 9, 2: 9, 3: 9}
    findings = get_detector("whatif").detect(run)
    assert [(f.root_cause, f.ranks[0].rank) for f in findings] == [(RootCause.WORKER, 3)]
    online = get_detector("whatif").detect_online(run)
    assert [f.detected_at_step for f in online] == [10]


@pytest.mark.parametrize("name,cause,cells", [
    ("AR", RootCause.WORKER, [(0, 0)]),
    ("ST", RootCause.STAGE_IMBALANCE, [(0, 3), (1, 3)]),
])
def test_reference_traces_are_diagnosed_as_in_the_paper(name, cause, cells):
    df, meta = read_trace(str(reference(f"trace-{name}.parquet")),
                          str(reference(f"meta-{name}.yaml")))
    findings = get_detector("whatif").detect(Run(df, meta, name))
    assert [(f.root_cause, sorted(_cells(f))) for f in findings] == [(cause, cells)]
