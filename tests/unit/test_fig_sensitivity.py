"""The sensitivity figure: fault recall by measured slowdown and false findings per 1,000 clean
worker-steps, from what `stragglerlab score` writes (figures/fig_sensitivity.py)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

from stragglerlab.analysis.detectors.base import Finding, RankRef, RootCause  # noqa: E402
from stragglerlab.analysis.ground_truth import CLEAN, FaultTruth, RunTruth  # noqa: E402
from stragglerlab.analysis.suite_score import score_suite  # noqa: E402
from stragglerlab.figures.data import FigureData, load_figure_data  # noqa: E402
from stragglerlab.figures.registry import build_figure, figure_inputs  # noqa: E402
from stragglerlab.figures.scores import parse_scores  # noqa: E402


def _run(name: str, slowdown: float | None) -> RunTruth:
    if slowdown is None:
        return RunTruth(name, CLEAN, RootCause.NONE, frozenset(), 4, None, None, dp_size=2,
                        pp_size=2, n_steps=25)
    fault = FaultTruth(kind="slow-worker", cause=RootCause.SLOW_WORKER, ranks=frozenset({1}),
                       first_step=0, last_step=None, measured_slowdown=slowdown)
    return RunTruth(name, "slow-worker", RootCause.SLOW_WORKER, frozenset({1}), 4, 0, None,
                    faults=[fault], dp_size=2, pp_size=2, n_steps=25)


def test_curve_and_rate_come_from_the_scores(tmp_path):
    hit = [Finding([RankRef(1, 1, 0)], 0, 9, RootCause.SLOW_WORKER, 0.9)]
    truths = [_run("a", 1.02), _run("b", 1.3), _run("c", 1.35), _run("clean", None)]
    suite = score_suite(truths, {"b": hit, "c": hit, "clean": hit})
    raw = json.loads(json.dumps({"whatif": suite.to_json()}))
    scores = parse_scores(raw, "scores.json")
    assert [b.label for b in scores.detectors[0].sensitivity][:2] == ["<1.05", "1.05-1.1"]
    result = build_figure("fig_sensitivity", FigureData(runs=[], scores=scores), tmp_path)
    ours = result.ours
    assert ours["faults"] == [1, 0, 0, 2, 0]
    assert ours["recall"]["whatif"] == [0.0, None, None, 1.0, None]
    # one finding over one clean run of 4 workers x 25 steps
    assert ours["false_findings_per_1k_clean_worker_steps"]["whatif"] == 10.0
    assert (tmp_path / "fig_sensitivity.png").stat().st_size > 1000
    assert figure_inputs("fig_sensitivity") == ("scores",)


def test_without_scores_it_is_no_data(tmp_path):
    result = build_figure("fig_sensitivity", load_figure_data([]), tmp_path)
    assert result.ours == {} and (tmp_path / "fig_sensitivity.png").is_file()
