"""Issue 14: dev/test splits, per-fault scoring with intervals, the new baselines, peeling."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.bootstrap import CaseBootstrap
from stragglerlab.analysis.detectors.base import Finding, RankRef, RootCause
from stragglerlab.analysis.detectors.bocd import BocdConfig, bocd_map_segments
from stragglerlab.analysis.detectors.nvrx import nvrx_scores
from stragglerlab.analysis.detectors.signatures import peel_stragglers
from stragglerlab.analysis.ground_truth import FaultTruth, RunTruth
from stragglerlab.analysis.scoring import score_run
from stragglerlab.analysis.suite_score import score_suite
from stragglerlab.util.errors import InputError
from stragglerlab.workflow.split_coverage import coverage_table, estimate_seconds, main
from stragglerlab.workflow.splits import LayoutFamily, Split, all_cases, expand_splits

CFG = {"seed": 14, "steps": 16, "dev": {"count": 44}, "test": {"count": 44}}


def test_splits_are_disjoint_seeded_and_cover_every_kind_and_family():
    a, b = all_cases(CFG), all_cases(CFG)
    assert [c.entry for c in a[Split.TEST]] == [c.entry for c in b[Split.TEST]]
    dev = {c.signature() for c in a[Split.DEV]}
    assert not dev & {c.signature() for c in a[Split.TEST]}
    test = a[Split.TEST]
    assert len(test) >= 40
    table = coverage_table(test)
    for kind, row in table.items():
        for fam in LayoutFamily:
            if kind == "stage-imbalance" and fam is LayoutFamily.PURE_DP:
                continue
            assert row[fam.value] >= 1, (kind, fam)
    assert {(c.dp, c.pp) for c in test if c.kinds == ["clean"]} >= {(2, 1), (1, 2), (4, 4)}
    assert any(len(c.entry["faults"]) == 3 for c in test)
    assert sum(estimate_seconds(c) for c in test) < 60 * 60


def test_every_targeted_fault_starts_after_enough_clean_traced_steps_to_measure_it():
    from stragglerlab.analysis.fault_control import MIN_BASELINE_STEPS

    for cases in all_cases(CFG).values():
        for c in cases:
            warmup = c.entry["run"]["warmup_steps"]
            for f in c.entry["faults"]:
                if f.get("targets"):
                    assert f["first_step"] - warmup >= MIN_BASELINE_STEPS, (c.name, f)
                    # at least 3 faulty steps
                    assert f["first_step"] + 2 <= c.entry["run"]["steps"] - 1, (c.name, f)
                if f.get("last_step") is not None:
                    assert f["last_step"] - f["first_step"] >= 2, (c.name, f)
    with pytest.raises(InputError, match="raise splits.steps"):
        all_cases({**CFG, "steps": 14})  # three warm-up steps leave no room at 14


def test_other_layouts_draw_cases_only_there_and_still_cover_every_family():
    from stragglerlab.workflow.splits import generate_split

    layouts = ((3, 1), (1, 3), (3, 2))
    cases = generate_split(Split.DEV, 707, 16, 36, layouts=layouts)
    assert {(c.dp, c.pp) for c in cases} == set(layouts)
    for c in cases:
        for f in c.entry["faults"]:
            for t in f.get("targets") or []:
                assert t["dp_rank"] < c.dp and t["stage"] < c.pp
    assert {c.kinds[0] for c in cases if (c.dp, c.pp) == (1, 3)} >= {"clean", "stage-imbalance"}


def test_splits_are_selected_by_run_and_bad_input_is_one_input_error():
    assert expand_splits(CFG) == ([], {})
    runs, entries = expand_splits({**CFG, "run": ["test"]})
    assert len(runs) == 44 and all(r.scenario.startswith("test-") for r in runs)
    with pytest.raises(InputError):
        expand_splits({**CFG, "run": ["train"]})
    with pytest.raises(InputError):
        all_cases({**CFG, "test": {"count": 5}})


def test_the_coverage_printout_takes_a_config_and_refuses_bad_ones_in_one_line(tmp_path, capsys):
    assert main([]) == 0 and "== test" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    for text, says in (("a: [", "cannot be read as YAML"), ("- 1\n", "is not a workflow config"),
                       ("splits: {test: {count: 5}}\n", "bad.yaml: ")):
        bad.write_text(text)
        assert main([str(bad)]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_splits_pace_every_case_by_default_and_pacing_changes_no_draw():
    paced, unpaced = all_cases(CFG), all_cases({**CFG, "pace_compute": False})
    for split in Split:
        assert all(c.entry["run"]["pace_compute"] is True for c in paced[split])
        assert all(c.entry["run"]["pace_compute"] is False for c in unpaced[split])
        assert [c.signature() for c in paced[split]] == [c.signature() for c in unpaced[split]]
        assert [c.seed for c in paced[split]] == [c.seed for c in unpaced[split]]
    with pytest.raises(InputError, match="pace_compute"):
        all_cases({**CFG, "pace_compute": "yes"})


def _f(ranks, cause, first=0, last=20, est=None, at=None):
    return Finding([RankRef(r, r % 2, r // 2) for r in ranks], first, last, cause, 0.9, est, at)


def _two_fault_truth():
    faults = [FaultTruth(kind="slow-worker", cause=RootCause.SLOW_WORKER, ranks=frozenset({1}),
                         first_step=4, last_step=None, measured_slowdown=None),
              FaultTruth(kind="gc-pauses", cause=RootCause.GC_PAUSES, ranks=frozenset({2}),
                         first_step=8, last_step=12, measured_slowdown=1.5)]
    return RunTruth("r", "slow-worker", RootCause.SLOW_WORKER, frozenset({1, 2}), 4, 4, None,
                    faults=faults, dp_size=2, pp_size=2)


def test_each_fault_is_scored_on_its_own_window_cause_and_latency():
    truth = _two_fault_truth()
    online = [_f([1], RootCause.SLOW_WORKER, at=6), _f([2], RootCause.GC_PAUSES, at=9)]
    s = score_run(truth, [_f([1], RootCause.SLOW_WORKER),
                          _f([2], RootCause.SLOW_WORKER, first=14, last=20, est=1.2)], online)
    assert [f.recalled for f in s.faults] == [True, False]  # the 2nd finding misses the window
    assert [f.latency_steps for f in s.faults] == [2, 1]
    s = score_run(truth, [_f([2], RootCause.GC_PAUSES, first=9, last=11, est=1.2)])
    assert [(f.recalled, f.cause_right) for f in s.faults] == [(False, False), (True, True)]
    assert s.faults[1].slowdown_error == pytest.approx(0.2)
    assert [f.to_json()["measured_slowdown"] for f in s.faults] == [None, 1.5]
    assert s.cause_ok  # the top cause names one of the run's causes


def test_suite_reports_intervals_and_kind_family_cells():
    truths = [_two_fault_truth(),
              RunTruth("c", "clean", RootCause.NONE, frozenset(), 4, None, None,
                       dp_size=4, pp_size=1)]
    out = score_suite(truths, {"r": [_f([1], RootCause.SLOW_WORKER)],
                               "c": [_f([0], RootCause.SLOW_WORKER)]}).to_json()
    assert out["fault_recall"] == pytest.approx(0.5)
    lo, hi = out["ci"]["f1"]
    assert lo <= out["f1"] <= hi and lo < hi
    assert set(out["by_kind_family"]) == {"clean|pure-dp", "gc-pauses|dp+pp",
                                          "slow-worker|dp+pp"}


def test_bootstrap_is_seeded_and_brackets_the_ratio():
    tp = np.array([1, 0, 1, 1, 0, 1.0])
    a = CaseBootstrap.draw(6, seed=3).ratio_ci(tp, np.ones(6))
    assert a == CaseBootstrap.draw(6, seed=3).ratio_ci(tp, np.ones(6))
    assert a[0] <= tp.mean() <= a[1]
    assert CaseBootstrap.draw(0).ratio_ci(np.array([]), np.array([])) is None


def test_peeling_finds_two_stragglers_on_different_rows_and_columns():
    steps = 10
    dp = np.ones((4, steps))
    st = np.ones((2, steps))
    dp[1], st[0] = 1.6, 1.6    # straggler (stage 0, dp 1)
    dp[2, 4:], st[1, 4:] = 1.4, 1.4  # straggler (stage 1, dp 2) from step 4
    found = peel_stragglers(dp, st, step_threshold=1.15, worker_threshold=1.1, min_steps=3)
    assert {(p, d) for p, d, *_ in found} == {(0, 1), (1, 2)}
    assert [f[2] for f in found if f[:2] == (1, 2)] == [4]
    clean = peel_stragglers(np.ones((4, steps)), np.ones((2, steps)), step_threshold=1.15,
                            worker_threshold=1.1, min_steps=3)
    assert clean == []


def test_bocd_sees_a_level_shift_and_not_noise():
    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.02, size=(2, 30))
    y[0, 12:] += 0.5
    starts, means = bocd_map_segments(y, BocdConfig())
    assert starts[0, -1] == 12 and means[0, -1] == pytest.approx(0.5, abs=0.05)
    assert starts[1, -1] < 3


def test_nvrx_individual_score_sees_a_rank_slowing_without_faster_peers():
    med = np.array([[1.0, 1.0, 2.0]])  # one rank, its own past is the reference
    relative, individual = nvrx_scores(med, np.array([0]))
    assert relative[0, -1] == 1.0 and individual[0, -1] == pytest.approx(0.5)


def test_a_failing_case_waits_out_its_cold_first_step():
    # A hang or crash case's collective timeout grows with its ranks: 10 s fails a
    # DP 4 x PP 4 case's stage 0 in its cold first step, before the fault.
    from stragglerlab.workflow.splits import FAILING_TIMEOUT_S, failing_timeout_s

    assert failing_timeout_s(2) == failing_timeout_s(4) == FAILING_TIMEOUT_S
    assert failing_timeout_s(16) == 4 * FAILING_TIMEOUT_S
    seen = 0
    for seed in (16, 17):  # 17 drew the DP 4 x PP 4 hang
        for cases in all_cases({**CFG, "seed": seed}).values():
            for c in cases:
                kinds = {f["kind"] for f in c.entry.get("faults") or []}
                if kinds & {"hang", "crash"}:
                    seen += 1
                    assert c.entry["run"]["collective_timeout_s"] == \
                        failing_timeout_s(c.dp * c.pp)
    assert seen
