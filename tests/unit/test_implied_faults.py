"""Imbalance phrased outside `faults` becomes an explicit fault
(stragglerlab/scenarios/implied_faults.py), so ground truth never calls an imbalanced job
clean."""

from __future__ import annotations

import pytest
import yaml

from stragglerlab.injectors.registry import build_injectors
from stragglerlab.scenarios.faults import parse_faults
from stragglerlab.scenarios.scenario import list_scenarios, load_scenario
from stragglerlab.util.errors import InputError


def _user(tmp_path, **scenarios) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"scenarios": scenarios}))
    return str(path)


def _implied(scenario) -> list[dict]:
    return [f for f in scenario.faults if "implied_by" in (f.get("params") or {})]


def test_an_uneven_partition_is_a_stage_imbalance(tmp_path):
    cfg = _user(tmp_path, mine={"parallel": {"dp": 2, "pp": 4, "layers_per_stage": [3, 1, 1, 1]},
                                "model": {"n_layers": 6}})
    s = load_scenario("mine", cfg)
    (fault,) = _implied(s)
    assert fault["kind"] == "stage-imbalance"
    assert fault["params"] == {"layers_per_stage": [3, 1, 1, 1],
                               "implied_by": "parallel.layers_per_stage"}
    # it is a fault like any other: the injector takes it and targets the heavy stage
    specs = parse_faults(s.faults, 2, 4, s.run.steps, "mine")
    (inj,) = build_injectors(specs, "mine")
    assert inj.shape_scenario(s).stage_partition() == [3, 1, 1, 1] and inj.heaviest == 0


def test_a_heavy_vocabulary_outside_faults_is_a_stage_imbalance(tmp_path):
    s = load_scenario("v", _user(tmp_path, v={"model": {"vocab": 65536}}))
    assert [(f["kind"], f["params"]["implied_by"]) for f in _implied(s)] == [
        ("stage-imbalance", "model.vocab")]


def test_long_tailed_lengths_are_a_sequence_imbalance(tmp_path):
    s = load_scenario("lt", _user(tmp_path, lt={
        "parallel": {"dp": 4, "pp": 1}, "data": {"length_distribution": "longtail",
                                                  "mean_seq_len": 48, "longtail_sigma": 1.2}}))
    (fault,) = _implied(s)
    assert fault == {"kind": "seq-imbalance", "params": {
        "mean_seq_len": 48, "longtail_sigma": 1.2, "rebalance": False,
        "implied_by": "data.length_distribution"}}
    build_injectors(parse_faults(s.faults, 4, 1, s.run.steps, "lt"), "lt")


def test_a_fault_of_the_kind_already_there_is_not_doubled(tmp_path):
    s = load_scenario("both", _user(tmp_path, both={
        "parallel": {"pp": 2, "layers_per_stage": [3, 1]},
        "faults": [{"kind": "stage-imbalance", "params": {"layers_per_stage": [3, 1]}}]}))
    assert len(s.faults) == 1 and not _implied(s)


@pytest.mark.parametrize("scenario", [s for s in list_scenarios() if not s.faults])
def test_built_in_clean_scenarios_stay_clean(scenario):
    assert not _implied(scenario), scenario.name


def test_a_heavy_vocabulary_the_balanced_partition_absorbs_is_not_a_fault(tmp_path):
    s = load_scenario("v", _user(tmp_path, v={"model": {"vocab": 8192}}))
    assert not _implied(s)  # the cost-balanced split gives the last stage fewer blocks
    even = load_scenario("e", _user(tmp_path, e={"model": {"vocab": 8192},
                                                  "parallel": {"partition": "even"}}))
    assert [f["params"]["implied_by"] for f in _implied(even)] == ["parallel.partition"]


def test_uniform_lengths_are_a_sequence_imbalance_that_stays_uniform(tmp_path):
    # Paced to sum(seq_len^2), uniform lengths run imbalanced too; the
    # implied fault must keep them uniform rather than reshape the job to long-tailed.
    s = load_scenario("un", _user(tmp_path, un={
        "parallel": {"dp": 2, "pp": 1}, "data": {"length_distribution": "uniform"}}))
    (fault,) = _implied(s)
    assert fault["kind"] == "seq-imbalance"
    assert fault["params"]["length_distribution"] == "uniform"
    (inj,) = build_injectors(parse_faults([fault], 2, 1, s.run.steps, "un"), "un")
    assert inj.shape_scenario(s).data.length_distribution.value == "uniform"
    bad = {**fault, "params": {**fault["params"], "length_distribution": "fixed"}}
    with pytest.raises(InputError, match="length_distribution must be one of"):
        build_injectors(parse_faults([bad], 2, 1, s.run.steps, "un"), "un")
