"""Scenario shapes that load but cannot run as written get one clear error: a number YAML
read as text, a worker listed twice in one fault, a pipeline stage with no block."""

from __future__ import annotations

import pytest
import yaml

from stragglerlab.injectors.registry import build_injectors
from stragglerlab.scenarios.faults import parse_faults
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import number_hint
from stragglerlab.workloads.pacing import ComputePacer


def _load(tmp_path, body: dict):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"scenarios": {"s": body}}))
    return load_scenario("s", config=str(path))


def test_yaml_numbers_read_as_text_say_why(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("scenarios:\n  s:\n    run: {lr: 1e-3}\n")  # YAML 1.1: a string
    with pytest.raises(InputError, match=r"run.lr must be a number, got '1e-3' \(YAML 1.1"):
        load_scenario("s", config=str(path))
    path.write_text("scenarios:\n  s:\n    faults:\n      - {kind: slow-worker, targets: "
                    "[{dp_rank: 0, stage: 0}], params: {factor: 2.0e0}}\n")
    s = load_scenario("s", config=str(path))
    with pytest.raises(InputError, match=r"params.factor must be a number.*YAML 1.1"):
        build_injectors(parse_faults(s.faults, s.parallel.dp, s.parallel.pp, s.run.steps,
                                     "s"), "s")
    assert number_hint("fast") == "" and number_hint(3) == ""


def test_a_worker_listed_twice_in_one_fault_is_refused():
    faults = [{"kind": "slow-worker", "targets": [{"dp_rank": 0, "stage": 0}] * 2,
               "params": {"factor": 2.0}}]
    with pytest.raises(InputError, match="listed twice"):
        parse_faults(faults, 2, 1, 10, "s")


@pytest.mark.parametrize("parallel,model", [
    ({"dp": 1, "pp": 8}, {"n_layers": 2}),
    ({"dp": 1, "pp": 2, "layers_per_stage": [0, 4]}, {"n_layers": 4}),
])
def test_a_stage_with_no_block_is_refused(tmp_path, parallel, model):
    with pytest.raises(InputError, match="would hold no transformer block"):
        _load(tmp_path, {"parallel": parallel, "model": model})


def test_the_last_stage_may_hold_the_logit_layer_alone(tmp_path):
    s = _load(tmp_path, {"parallel": {"dp": 1, "pp": 2, "layers_per_stage": [4, 0]},
                         "model": {"n_layers": 4}})
    assert s.stage_partition() == [4, 0]


def test_an_op_with_no_modelled_work_keeps_the_cpu_rule():
    pacer = ComputePacer(cores=1.0, margin=1.0, warmup_rate=True)
    with pacer.op(slot=0, work=0.0):
        pass  # no division by zero, nothing timed for the slot
    pacer.settle(slots=1, pp=1)
    assert pacer.rate == [0.0]


def test_list_scenarios_checks_a_users_faults_as_train_does(tmp_path, capsys):
    from stragglerlab.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"scenarios": {"neg": {"faults": [
        {"kind": "slow-worker", "targets": [{"dp_rank": 0, "stage": 0}],
         "params": {"factor": -2}}]}}}))
    assert main(["list", "scenarios", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "scenario 'neg'" in err and "params.factor=-2 outside" in err


def test_a_key_given_twice_is_refused_in_yaml_and_json(tmp_path):
    from stragglerlab.util.filecheck import load_json

    path = tmp_path / "s.yaml"
    path.write_text("scenarios:\n  a:\n    parallel: {dp: 2}\n    parallel: {dp: 4}\n")
    with pytest.raises(InputError, match="'parallel' is given twice in one mapping, line 4"):
        load_scenario("a", config=str(path))
    doc = tmp_path / "faults.json"
    doc.write_text('[{"kind": "slow-worker", "kind": "crash", "targets": []}]')
    with pytest.raises(InputError, match="holds the key 'kind' twice"):
        load_json(doc, "faults.json", "fix it")
    doc.write_text('[{"kind": "slow-worker"}, {"kind": "crash"}]')  # one each: fine
    assert len(load_json(doc, "faults.json", "fix it")) == 2
