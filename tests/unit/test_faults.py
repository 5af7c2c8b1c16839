"""stragglerlab.scenarios.faults: parse_faults checks, FaultSpec windows, faults in scenario
configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stragglerlab.scenarios.faults import FaultKind, FaultRecord, FaultSpec, Target, parse_faults
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.util.errors import InputError

DP, PP, STEPS = 2, 3, 10


def parse(*entries: object) -> list[FaultSpec]:
    return parse_faults(list(entries), dp=DP, pp=PP, steps=STEPS, where="my.yaml")


def parse_error(*entries: object) -> str:
    with pytest.raises(InputError) as info:
        parse(*entries)
    assert info.value.path == "my.yaml"
    return str(info.value)


def slow(**over) -> dict:
    entry = {"kind": "slow-worker", "targets": [{"dp_rank": 1, "stage": 2}],
             "first_step": 3, "last_step": 7, "params": {"factor": 2.0}}
    entry.update(over)
    return entry


# --- valid entries ---------------------------------------------------------------------


def test_valid_entry_becomes_a_spec_with_global_ranks():
    (spec,) = parse(slow(targets=[{"dp_rank": 1, "stage": 2}, {"dp_rank": 0, "stage": 1}]))
    assert spec.kind is FaultKind.SLOW_WORKER
    # rank = stage * dp + dp_rank
    assert spec.targets == (Target(rank=5, dp_rank=1, stage=2), Target(rank=2, dp_rank=0, stage=1))
    assert (spec.first_step, spec.last_step) == (3, 7)
    assert spec.params == {"factor": 2.0}
    assert spec.targets[0].to_dict() == {"rank": 5, "dp_rank": 1, "stage": 2}


def test_defaults_and_job_wide_faults():
    specs = parse({"kind": "gc-pauses"},
                  {"kind": "stage-imbalance", "targets": None, "params": None},
                  {"kind": "crash", "targets": [{"stage": 0, "dp_rank": 0}], "first_step": 9})
    assert [s.kind for s in specs] == [FaultKind.GC_PAUSES, FaultKind.STAGE_IMBALANCE,
                                       FaultKind.CRASH]
    gc, stage, crash = specs
    assert gc.targets == () and gc.first_step == 0 and gc.last_step is None and gc.params == {}
    assert stage.targets == () and stage.params == {}
    assert crash.targets == (Target(0, 0, 0),) and crash.first_step == STEPS - 1
    assert parse() == []


def test_params_are_copied():
    params = {"factor": 2.0}
    (spec,) = parse(slow(params=params))
    params["factor"] = 9.0
    assert spec.params == {"factor": 2.0}


def test_every_kind_value_parses():
    for kind in FaultKind:
        (spec,) = parse({"kind": kind.value, "targets": [{"dp_rank": 0, "stage": 0}]})
        assert spec.kind is kind


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["slow-worker", ["kind", "slow-worker"], 3, None])
def test_non_mapping_entry(entry):
    msg = parse_error(slow(), entry)
    assert "faults[1]" in msg and "mapping" in msg


def test_unknown_key():
    msg = parse_error(slow(factor=2.0, target=[]))
    assert "faults[0]" in msg and "unknown key(s) factor, target" in msg
    assert "known:" in msg and "first_step" in msg


@pytest.mark.parametrize("kind", ["slow_worker", "SLOW-WORKER", None, 3, ["crash"]])
def test_unknown_kind_lists_the_kinds(kind):
    entry = slow(kind=kind) if kind is not None else {"targets": []}
    msg = parse_error(entry)
    assert "faults[0]" in msg and "kind" in msg
    for k in FaultKind:
        assert k.value in msg


@pytest.mark.parametrize("target", [{"dp_rank": 2, "stage": 0}, {"dp_rank": 0, "stage": 3},
                                    {"dp_rank": -1, "stage": 0}, {"dp_rank": 0, "stage": -1}])
def test_target_outside_the_layout(target):
    msg = parse_error(slow(), slow(targets=[{"dp_rank": 0, "stage": 0}, target]))
    assert "faults[1]" in msg and "outside the layout" in msg and f"dp={DP}, pp={PP}" in msg


@pytest.mark.parametrize("target", [
    {"dp_rank": 0},                              # stage missing
    {"stage": 0},                                # dp_rank missing
    {"dp_rank": 0, "stage": 0, "rank": 0},       # rank is derived, not given
    {"dp_rank": "0", "stage": 0},                # not an int
    {"dp_rank": 0.0, "stage": 0},
    {"dp_rank": True, "stage": 0},               # a bool is not a rank
    [0, 0],                                      # not a mapping
    "dp0-stage0",
])
def test_bad_target_shape(target):
    msg = parse_error(slow(targets=[target]))
    assert "faults[0]" in msg and "each target is {dp_rank: D, stage: S}" in msg


@pytest.mark.parametrize("targets", [5, "dp0", {"dp_rank": 0, "stage": 0}])
def test_targets_not_a_list(targets):
    msg = parse_error(slow(targets=targets))
    assert "faults[0]" in msg and "targets must be a list" in msg


@pytest.mark.parametrize("first, last", [(STEPS, None), (STEPS + 5, None), (-1, None),
                                         (5, 4), (0, -1), (None, None), (1.0, None),
                                         (True, None), ("3", None), (2, "7"), (2, 7.0)])
def test_bad_step_window(first, last):
    msg = parse_error(slow(first_step=first, last_step=last))
    assert "faults[0]" in msg
    assert f"0 <= first_step < run.steps={STEPS}" in msg and "last_step null or >= first_step" \
        in msg


def test_single_step_window_is_fine():
    (spec,) = parse(slow(first_step=4, last_step=4))
    assert (spec.first_step, spec.last_step) == (4, 4)
    (spec,) = parse(slow(first_step=0, last_step=STEPS + 100))  # past the end: to the end
    assert spec.last_step == STEPS + 100


@pytest.mark.parametrize("params", [[1, 2], "factor=2", 2.0, 0, False, ""])
def test_params_not_a_mapping(params):
    msg = parse_error(slow(params=params))
    assert "faults[0]" in msg and "params must be a mapping" in msg


def test_the_first_bad_entry_is_named():
    msg = parse_error(slow(), slow(), slow(first_step=20), slow(kind="nope"))
    assert "faults[2]" in msg and "faults[3]" not in msg


# --- FaultSpec -------------------------------------------------------------------------


def test_active_window_is_inclusive():
    spec = FaultSpec(FaultKind.NET_DELAY, (Target(1, 1, 0),), first_step=3, last_step=5)
    assert [s for s in range(10) if spec.active(s)] == [3, 4, 5]
    single = FaultSpec(FaultKind.NET_DELAY, (), first_step=4, last_step=4)
    assert [s for s in range(10) if single.active(s)] == [4]


def test_active_without_last_step_runs_to_the_end():
    spec = FaultSpec(FaultKind.HANG, (Target(0, 0, 0),), first_step=2)
    assert not spec.active(0) and not spec.active(1)
    assert all(spec.active(s) for s in (2, 3, 100, 10**9))
    assert FaultSpec(FaultKind.GC_PAUSES, ()).active(0)


def test_targets_rank():
    spec = FaultSpec(FaultKind.SLOW_WORKER, (Target(5, 1, 2), Target(2, 0, 1)))
    assert [r for r in range(8) if spec.targets_rank(r)] == [2, 5]
    assert not any(FaultSpec(FaultKind.GC_PAUSES, ()).targets_rank(r) for r in range(8))


def test_fault_record_json_form():
    rec = FaultRecord("slow-worker", [{"rank": 1, "dp_rank": 1, "stage": 0}], 2, None,
                      {"factor": 2.0}, {"factor": 1.98})
    assert rec.to_dict() == {"kind": "slow-worker",
                             "targets": [{"rank": 1, "dp_rank": 1, "stage": 0}],
                             "first_step": 2, "last_step": None, "requested": {"factor": 2.0},
                             "measured": {"factor": 1.98}}


# --- faults inside scenario configs ----------------------------------------------------


def config_with(tmp_path: Path, faults: list, **sections) -> Path:
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump({"scenarios": {"bad": {"parallel": {"dp": 2, "pp": 2},
                                                          "run": {"steps": 8},
                                                          "faults": faults, **sections}}}))
    return path


@pytest.mark.parametrize("fault, problem", [
    ({"kind": "slow-worker", "targets": [{"dp_rank": 2, "stage": 0}]}, "outside the layout"),
    ({"kind": "slow-down", "targets": [{"dp_rank": 0, "stage": 0}]}, "is not one of"),
    ({"kind": "crash", "targets": [{"dp_rank": 0, "stage": 0}], "first_step": 8},
     "first_step < run.steps=8"),
    ({"kind": "crash", "targets": [{"dp_rank": 0, "stage": 0}], "when": 3}, "unknown key"),
    ({"kind": "crash", "targets": 1}, "targets must be a list"),
])
def test_load_scenario_rejects_a_bad_fault(tmp_path: Path, fault: dict, problem: str):
    path = config_with(tmp_path, [{"kind": "gc-pauses"}, fault])
    with pytest.raises(InputError) as info:
        load_scenario("bad", config=path)
    msg = str(info.value)
    assert str(path) in msg and "scenario 'bad'" in msg and "faults[1]" in msg
    assert problem in msg


def test_load_scenario_rejects_a_non_mapping_fault(tmp_path: Path):
    path = config_with(tmp_path, ["slow-worker"])
    with pytest.raises(InputError) as info:
        load_scenario("bad", config=path)
    assert str(path) in str(info.value) and "faults[0]" in str(info.value)


def test_load_scenario_keeps_a_good_fault(tmp_path: Path):
    fault = {"kind": "slow-worker", "targets": [{"dp_rank": 1, "stage": 1}], "first_step": 2,
             "last_step": 5, "params": {"factor": 1.5}}
    sc = load_scenario("bad", config=config_with(tmp_path, [fault]))
    assert sc.faults == [fault]
    (spec,) = parse_faults(sc.faults, sc.parallel.dp, sc.parallel.pp, sc.run.steps, "x")
    assert spec.targets == (Target(3, 1, 1),)


def test_overrides_that_shrink_the_run_are_checked_against_the_faults():
    # The built-in crash scenario fails at step 5: fewer steps make it invalid.
    with pytest.raises(InputError, match=r"faults\[0\].*run.steps=3"):
        load_scenario("crash", overrides={"run": {"steps": 3, "warmup_steps": 1}})
