"""Scenario loader: built-in scenarios, user --config merging, overrides, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stragglerlab.cli import main
from stragglerlab.scenarios.scenario import (
    DEFAULT_CONFIG,
    list_scenarios,
    load_scenario,
    scenario_table,
    scenario_to_dict,
)
from stragglerlab.scenarios.scenario_vocab import Backend, LengthDistribution
from stragglerlab.util.errors import InputError


def write_config(tmp_path: Path, obj: object, name: str = "user.yaml") -> Path:
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else yaml.safe_dump(obj))
    return path


def bad_scenario(tmp_path: Path, over: dict) -> tuple[Path, InputError]:
    """Load a user scenario 'bad' = defaults + `over`; return the config path and its error."""
    path = write_config(tmp_path, {"scenarios": {"bad": over}})
    with pytest.raises(InputError) as info:
        load_scenario("bad", config=path)
    return path, info.value


# --- built-in scenarios ----------------------------------------------------------------


def test_every_builtin_scenario_loads_and_checks():
    _defaults, table, where = scenario_table()
    assert where == str(DEFAULT_CONFIG)
    scenarios = list_scenarios()
    assert [s.name for s in scenarios] == sorted(table)
    assert len(scenarios) >= 2
    for s in scenarios:
        assert s.check("x") is s
        assert s.world_size == s.parallel.dp * s.parallel.pp
        layers = s.parallel.stage_layers(s.model.n_layers)
        assert len(layers) == s.parallel.pp and sum(layers) == s.model.n_layers
        assert isinstance(s.data.length_distribution, LengthDistribution)
        assert isinstance(s.run.backend, Backend)
        assert 0 <= s.run.warmup_steps < s.run.steps


def test_clean_dp2_pp2_layout():
    s = load_scenario("clean-dp2-pp2")
    assert (s.parallel.dp, s.parallel.pp, s.world_size) == (2, 2, 4)
    assert s.name == "clean-dp2-pp2" and s.description
    assert s.faults == []


def test_clean_dp2_pp4_layout():
    s = load_scenario("clean-dp2-pp4")
    assert (s.parallel.dp, s.parallel.pp, s.world_size) == (2, 4, 8)
    assert s.parallel.stage_layers(s.model.n_layers) == [2, 2, 2, 2]


def test_scenario_to_dict_is_plain():
    d = scenario_to_dict(load_scenario("clean-dp2-pp2"))
    assert d["data"]["length_distribution"] == "fixed"
    assert d["run"]["backend"] == "auto"
    assert d["parallel"]["dp"] == 2
    yaml.safe_dump(d)  # plain types only


# --- merging ---------------------------------------------------------------------------


def test_overrides_dict_applies_on_top():
    s = load_scenario("clean-dp2-pp2", overrides={"run": {"steps": 5, "seed": 7},
                                                  "parallel": {"microbatches": 2}})
    base = load_scenario("clean-dp2-pp2")
    assert (s.run.steps, s.run.seed, s.parallel.microbatches) == (5, 7, 2)
    assert s.run.lr == base.run.lr  # untouched siblings kept
    assert s.parallel.dp == 2 and s.parallel.pp == 2


def test_user_config_merges_defaults_and_builtin_scenarios(tmp_path: Path):
    path = write_config(tmp_path, {
        "defaults": {"run": {"seed": 42}, "model": {"vocab": 256}},
        "scenarios": {
            "clean-dp2-pp2": {"run": {"steps": 9}},
            "mine": {"description": "new one", "parallel": {"dp": 1, "pp": 4},
                     "data": {"length_distribution": "longtail"},
                     "faults": [{"kind": "slow-worker", "targets": [{"dp_rank": 0, "stage": 1}],
                                 "params": {"factor": 2.0}}]},
        },
    })
    s = load_scenario("clean-dp2-pp2", config=path)
    assert (s.run.seed, s.model.vocab, s.run.steps) == (42, 256, 9)
    assert (s.parallel.dp, s.parallel.pp) == (2, 2)  # built-in scenario override kept
    s4 = load_scenario("clean-dp2-pp4", config=path)
    assert s4.run.seed == 42 and s4.model.n_layers == 8
    mine = load_scenario("mine", config=path)
    assert mine.description == "new one"
    assert (mine.parallel.dp, mine.parallel.pp, mine.world_size) == (1, 4, 4)
    assert mine.data.length_distribution is LengthDistribution.LONGTAIL
    assert mine.faults[0] == {"kind": "slow-worker", "targets": [{"dp_rank": 0, "stage": 1}],
                              "params": {"factor": 2.0}}
    # long-tailed lengths and a logit layer (vocab 256) 12 % over a one-block stage are
    # imbalance the job runs: faults too (stragglerlab/scenarios/implied_faults.py)
    assert [(f["kind"], f["params"]["implied_by"]) for f in mine.faults[1:]] == [
        ("stage-imbalance", "model.vocab"), ("seq-imbalance", "data.length_distribution")]
    assert mine.run.seed == 42
    names = [x.name for x in list_scenarios(path)]
    assert {"clean-dp2-pp2", "clean-dp2-pp4", "mine"} <= set(names)


def test_user_config_without_scenarios_and_empty_file(tmp_path: Path):
    empty = write_config(tmp_path, "", "empty.yaml")
    assert load_scenario("clean-dp2-pp2", config=empty) == load_scenario("clean-dp2-pp2")
    only_defaults = write_config(tmp_path, {"defaults": {"run": {"steps": 5}}})
    assert load_scenario("clean-dp2-pp2", config=only_defaults).run.steps == 5


def test_layers_per_stage_explicit(tmp_path: Path):
    s = load_scenario("clean-dp2-pp2", overrides={"parallel": {"layers_per_stage": [1, 3]}})
    assert s.parallel.stage_layers(s.model.n_layers) == [1, 3]


def test_null_for_optional_field():
    s = load_scenario("clean-dp2-pp2", overrides={"run": {"cores_per_rank": 1.5}})
    assert s.run.cores_per_rank == 1.5
    s = load_scenario("clean-dp2-pp2", overrides={"run": {"cores_per_rank": 2}})
    assert s.run.cores_per_rank == 2.0 and isinstance(s.run.cores_per_rank, float)


# --- bad input -------------------------------------------------------------------------


def test_unknown_key(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"run": {"stepz": 3}})
    msg = str(err)
    assert str(path) in msg and err.path == str(path)
    assert "run" in msg and "stepz" in msg and "unknown key" in msg


def test_unknown_section(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"modle": {"hidden": 3}})
    assert str(path) in str(err) and "modle" in str(err)


def test_wrong_type(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"run": {"steps": "ten"}})
    msg = str(err)
    assert str(path) in msg and "run.steps" in msg and "'ten'" in msg and "integer" in msg


def test_bool_is_not_an_int(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"parallel": {"dp": True}})
    assert str(path) in str(err) and "parallel.dp" in str(err) and "integer" in str(err)
    path, err = bad_scenario(tmp_path, {"run": {"lr": False}})
    assert "run.lr" in str(err) and "number" in str(err)


def test_int_is_not_a_bool(tmp_path: Path):
    _path, err = bad_scenario(tmp_path, {"run": {"trace": 1}})
    assert "run.trace" in str(err) and "true or false" in str(err)


def test_section_must_be_mapping(tmp_path: Path):
    _path, err = bad_scenario(tmp_path, {"model": 5})
    assert "model" in str(err) and "mapping" in str(err)


def test_bad_enum_lists_allowed_values(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"data": {"length_distribution": "gaussian"}})
    msg = str(err)
    assert str(path) in msg and "data.length_distribution" in msg and "gaussian" in msg
    for allowed in ("fixed", "uniform", "longtail"):
        assert allowed in msg


def test_layers_per_stage_wrong_sum(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"parallel": {"layers_per_stage": [1, 1]}})
    assert str(path) in str(err) and "layers_per_stage" in str(err)
    assert "n_layers" in str(err)


def test_layers_per_stage_wrong_length(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"parallel": {"layers_per_stage": [1, 1, 2]}})
    assert str(path) in str(err) and "layers_per_stage" in str(err) and "pp=2" in str(err)


def test_layers_per_stage_negative(tmp_path: Path):
    _path, err = bad_scenario(tmp_path, {"parallel": {"layers_per_stage": [-1, 5]}})
    assert "layers_per_stage" in str(err)


def test_layers_per_stage_element_type(tmp_path: Path):
    _path, err = bad_scenario(tmp_path, {"parallel": {"layers_per_stage": [2, "2"]}})
    assert "layers_per_stage[1]" in str(err)


def test_hidden_not_divisible_by_heads(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"model": {"hidden": 30, "n_heads": 4}})
    assert str(path) in str(err) and "model.hidden" in str(err) and "n_heads" in str(err)


@pytest.mark.parametrize("over, key", [
    ({"parallel": {"pp": 0}}, "parallel.pp"),
    ({"parallel": {"dp": 0}}, "parallel.dp"),
    ({"model": {"n_heads": 0}}, "model.n_heads"),
    ({"model": {"vocab": 0}}, "model.vocab"),
])
def test_zero_sizes_are_input_errors_not_crashes(tmp_path: Path, over: dict, key: str):
    path, err = bad_scenario(tmp_path, over)
    assert str(path) in str(err) and key in str(err)


def test_warmup_not_below_steps(tmp_path: Path):
    path, err = bad_scenario(tmp_path, {"run": {"steps": 3, "warmup_steps": 3}})
    assert str(path) in str(err) and "run.warmup_steps" in str(err)
    with pytest.raises(InputError, match="warmup_steps"):
        load_scenario("clean-dp2-pp2", overrides={"run": {"steps": 2, "warmup_steps": 5}})


def test_unknown_scenario_lists_known():
    with pytest.raises(InputError) as info:
        load_scenario("no-such")
    msg = str(info.value)
    assert "no-such" in msg and str(DEFAULT_CONFIG) in msg
    assert "clean-dp2-pp2" in msg and "clean-dp2-pp4" in msg


def test_unknown_scenario_with_user_config_lists_user_scenarios(tmp_path: Path):
    path = write_config(tmp_path, {"scenarios": {"mine": {}}})
    with pytest.raises(InputError) as info:
        load_scenario("nope", config=path)
    msg = str(info.value)
    assert str(path) in msg and "mine" in msg and "clean-dp2-pp2" in msg


def test_yaml_syntax_error(tmp_path: Path):
    path = write_config(tmp_path, "scenarios:\n  x: {run: [1, 2\n")
    with pytest.raises(InputError) as info:
        load_scenario("x", config=path)
    assert str(path) in str(info.value) and "YAML" in str(info.value)


def test_missing_config_file(tmp_path: Path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as info:
        load_scenario("clean-dp2-pp2", config=path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("obj", [
    {"defaults": {}, "scenario": {"x": {}}},  # typo of 'scenarios'
    {"run": {"steps": 3}},
    ["defaults"],
    "just text",
])
def test_top_level_keys_restricted(tmp_path: Path, obj: object):
    path = write_config(tmp_path, yaml.safe_dump(obj))
    with pytest.raises(InputError) as info:
        load_scenario("clean-dp2-pp2", config=path)
    assert str(path) in str(info.value) and "defaults" in str(info.value)


def test_scenarios_must_be_mapping(tmp_path: Path):
    path = write_config(tmp_path, {"scenarios": ["a", "b"]})
    with pytest.raises(InputError, match="'scenarios' must be a mapping"):
        load_scenario("clean-dp2-pp2", config=path)


def test_one_bad_scenario_is_reported_by_list(tmp_path: Path):
    path = write_config(tmp_path, {"scenarios": {"broken": {"run": {"steps": 0}}}})
    load_scenario("clean-dp2-pp2", config=path)  # others still load
    with pytest.raises(InputError, match="broken"):
        list_scenarios(path)


# --- CLI -------------------------------------------------------------------------------


def test_cli_train_unknown_scenario_exits_2(tmp_path: Path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "stragglerlab", "train", "--scenario", "no-such",
         "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no-such" in lines[0] and "unknown scenario" in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_cli_train_bad_config_fails_before_launch(tmp_path: Path, monkeypatch, capsys):
    # If the launcher were reached, importing it would raise ImportError instead of exit 2.
    monkeypatch.setitem(sys.modules, "stragglerlab.workloads.launcher", None)
    path = write_config(tmp_path, {"scenarios": {"x": {"run": {"stepz": 1}}}})
    rc = main(["train", "--scenario", "x", "--config", str(path), "--out",
               str(tmp_path / "run")])
    assert rc == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err and "stepz" in err
    rc = main(["train", "--scenario", "clean-dp2-pp2", "--steps", "0", "--out",
               str(tmp_path / "run")])
    assert rc == 2 and "run.steps" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_warmup_and_auto_pace_rates_pace_variable_lengths_too():
    # A varlen microbatch is paced to its own modelled work (its attention's sum(s^2)),
    # so variable lengths do not fall back to the CPU rule.
    from stragglerlab.scenarios.scenario import load_scenario
    from stragglerlab.scenarios.scenario_vocab import PaceRate

    for rate in ("warmup", "auto"):
        over = {"run": {"pace_rate": rate}}
        seq = load_scenario("seq-imbalance", overrides=over)
        assert seq.varlen and seq.paced_to_warmup_rate
        longtail = load_scenario("clean-dp2-pp2", overrides={
            **over, "data": {"length_distribution": "longtail"}})
        assert longtail.varlen and longtail.paced_to_warmup_rate
    clean = load_scenario("clean-dp2-pp2")  # the built-ins' default
    assert not clean.varlen and clean.paced_to_warmup_rate
    assert clean.run.pace_rate is PaceRate.AUTO
    assert clean.run.warmup_steps == 3 and clean.run.pace_margin == 1.2
    cpu = load_scenario("clean-dp2-pp2", overrides={"run": {"pace_rate": "cpu"}})
    assert not cpu.paced_to_warmup_rate
    # A torch workload's own pacer knows no device factor: never paced to the rate here.
    assert not load_scenario("torch-ddp-slow", overrides={"run": {"pace_rate": "auto"}}
                             ).paced_to_warmup_rate


def test_noise_floor_scenarios_are_the_clean_built_ins_at_the_default_workload():
    # The floor's second workload size (config/noise-floor-scenarios.yaml): each is its
    # built-in clean-<layout> twin in everything but the tokens per microbatch, which are
    # what a scenario that leaves `data` out runs at.
    floor_file = DEFAULT_CONFIG.parent / "noise-floor-scenarios.yaml"
    defaults, _, _ = scenario_table()
    small = [s for s in list_scenarios(floor_file) if s.name.startswith("clean-small-")]
    assert len(small) == 6
    for s in small:
        twin = load_scenario(s.name.replace("clean-small-", "clean-"))
        a, b = scenario_to_dict(s), scenario_to_dict(twin)
        assert a["data"]["tokens_per_microbatch"] == defaults["data"]["tokens_per_microbatch"]
        assert b["data"]["tokens_per_microbatch"] == 1024
        for d in (a, b):
            d.pop("name"), d.pop("description"), d["data"].pop("tokens_per_microbatch")
        assert a == b, s.name
