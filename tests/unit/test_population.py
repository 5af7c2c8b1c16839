"""The workflow's job population: the default suite's coverage, determinism, entries, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.scenarios.scenario import load_scenario, scenario_to_dict
from stragglerlab.util.errors import InputError
from stragglerlab.workflow.population import (
    TARGETED_KINDS,
    coverage,
    expand_group,
    expand_population,
    parse_layout,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER_JOBS = {"clean-dp2-pp2", "clean-dp4-pp4", "slow-worker-1", "slow-worker-2",
              "slow-worker-3", "gc-pauses",
              "gc-planned", "stage-imbalance", "stage-rebalanced", "seq-imbalance",
              "seq-rebalanced"}


@pytest.fixture(scope="module")
def default_cfg() -> dict:
    return yaml.safe_load((ROOT / "config" / "workflow.yaml").read_text())


@pytest.fixture(scope="module")
def default_pop(default_cfg):
    return expand_population(default_cfg["fixed"], default_cfg["population"])


def layout(entry: dict) -> str:
    return f"dp{entry['parallel']['dp']}-pp{entry['parallel']['pp']}"


def test_default_suite_covers_the_detector_evaluation(default_pop):
    runs = default_pop.runs
    assert len(runs) >= 24
    assert len({r.key for r in runs}) == len(runs)  # one folder per run
    cov = coverage(default_pop)
    for kind in FaultKind:
        assert cov[kind.value]["runs"] >= 2, kind
        assert len(cov[kind.value]["seeds"]) >= 2, kind
    for kind in TARGETED_KINDS:  # victims on different ranks and on different stages
        assert len(cov[kind.value]["ranks"]) >= 2, kind
        assert len(cov[kind.value]["stages"]) >= 2, kind
    assert cov["clean"]["runs"] >= 3
    assert PAPER_JOBS <= {r.scenario for r in runs if r.group == "fixed"}


def test_default_suite_mix_layouts_and_long_context(default_pop):
    entries = [default_pop.entries[r.scenario] for r in default_pop.runs]
    layouts = [layout(e) for e in entries]
    assert layouts.count("dp2-pp2") > len(layouts) / 2  # dp2-pp2 mainly
    assert {"dp2-pp4", "dp4-pp1"} <= set(layouts)
    # Most jobs clean or mildly straggling / common causes, few slow workers (paper's mix).
    kinds = [r.kind for r in default_pop.runs]
    assert kinds.count("clean") >= kinds.count("net-throttle") + kinds.count("net-delay")
    # Long-context jobs: a longer context than every other job, with sequence imbalance.
    ctx = [e["model"]["max_seq_len"] for e in entries]
    longest = [e for e in entries if e["model"]["max_seq_len"] == max(ctx)]
    assert len(longest) >= 2 and max(ctx) >= 2 * sorted(set(ctx))[-2]
    assert all(e["faults"][0]["kind"] == "seq-imbalance" for e in longest)


def test_sampled_slow_workers_start_mid_run(default_pop):
    for run in default_pop.runs:
        entry = default_pop.entries[run.scenario]
        if run.group != "fixed" and run.kind == "slow-worker":
            (fault,) = entry["faults"]
            assert fault["first_step"] >= 5
            assert fault["first_step"] < entry["run"]["steps"] - 3  # faulty steps to detect


def test_failed_kinds_keep_traced_steps(default_pop):
    for run in default_pop.runs:
        entry = default_pop.entries[run.scenario]
        for f in entry["faults"]:
            if f["kind"] in ("hang", "crash"):
                assert f["first_step"] > entry["run"]["warmup_steps"]


SMALL = {"seed": 3, "steps": 12, "groups": [
    {"name": "slow", "kind": "slow-worker", "count": 3, "first_step": [5, 8],
     "layouts": ["dp2-pp2", "dp4-pp1"], "params": {"factor": [1.5, 2.0, 2.5]}},
    {"name": "crash", "kind": "crash", "count": 2, "first_step": [3, 6]},
]}


def test_expansion_is_deterministic_and_seeded(default_cfg, default_pop):
    assert expand_population(default_cfg["fixed"], default_cfg["population"]) == default_pop
    a = expand_population([], SMALL)
    c = expand_population([], dict(SMALL, seed=4))
    assert [r.key for r in a.runs] == [r.key for r in c.runs]
    assert a.entries != c.entries  # victims / magnitudes / layouts resampled


def test_adding_a_group_leaves_the_others_unchanged():
    more = dict(SMALL, groups=[{"name": "extra", "kind": "crash", "first_step": 4}]
                + SMALL["groups"])
    a = expand_population([], SMALL)
    b = expand_population([], more)
    assert all(b.entries[name] == entry for name, entry in a.entries.items())
    assert set(b.entries) - set(a.entries) == {"pop-extra-00"}


def test_victims_do_not_repeat_while_cells_remain():
    runs, entries = expand_group({"name": "v", "kind": "slow-worker", "count": 4,
                                  "first_step": [5, 6], "params": {"factor": 1.5}}, 7, 12)
    victims = [tuple(e["faults"][0]["targets"][0].values()) for e in entries.values()]
    assert sorted(victims) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # every dp2-pp2 cell once
    assert all(5 <= e["faults"][0]["first_step"] <= 6 for e in entries.values())


def test_params_and_layouts_cycle_through_every_value():
    _, entries = expand_group({"name": "s", "kind": "slow-worker", "count": 4, "first_step": 5,
                               "layouts": ["dp2-pp2", "dp2-pp4"],
                               "params": {"factor": [1.2, 1.4, 1.6, 1.8]}}, 1, 12)
    es = list(entries.values())
    assert sorted(e["faults"][0]["params"]["factor"] for e in es) == [1.2, 1.4, 1.6, 1.8]
    assert sorted(layout(e) for e in es) == ["dp2-pp2", "dp2-pp2", "dp2-pp4", "dp2-pp4"]
    pp4 = next(e for e in es if layout(e) == "dp2-pp4")
    assert pp4["model"]["n_layers"] == 8  # layers per stage kept (clean-dp2-pp4's model)


def test_seeds_per_job_and_group_steps():
    runs, entries = expand_group({"name": "c", "count": 2, "seeds": 2, "steps": 9}, 0, 16)
    assert [(r.scenario, r.seed) for r in runs] == [
        ("pop-c-00", 0), ("pop-c-00", 1), ("pop-c-01", 2), ("pop-c-01", 3)]
    assert all(r.kind == "clean" and r.group == "c" for r in runs)
    assert all(e["run"]["steps"] == 9 and e["faults"] == [] for e in entries.values())


def test_entry_round_trips_through_the_train_config(tmp_path, default_pop):
    """The file the train rule passes as --config yields exactly the resolved scenario."""
    for name in ["pop-slow-worker-01", "seq-rebalanced", "pop-long-context-00"]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(default_pop.scenario_yaml(name))
        loaded = scenario_to_dict(load_scenario(name, config=path))
        assert loaded.pop("name") == name
        assert loaded == default_pop.entries[name]


def test_fixed_jobs_keep_the_builtin_scenario(default_pop):
    builtin = scenario_to_dict(load_scenario("slow-worker-2"))
    builtin.pop("name")
    assert default_pop.entries["slow-worker-2"] == builtin
    assert default_pop.entries["stage-imbalance"]["run"]["steps"] == 16  # steps override


@pytest.mark.parametrize("fixed, population, message", [
    ([{"scenario": "nope", "seeds": [0]}], None, "unknown scenario 'nope'"),
    ([{"scenario": "crash", "seeds": [True]}], None, "seeds must be a non-empty list"),
    ([{"scenario": "crash", "seeds": [0, 0]}], None, "repeat a seed"),
    ([{"scenario": "crash", "seeds": [0]}, {"scenario": "crash", "seeds": [1]}], None,
     "listed twice"),
    ({"crash": {"seeds": [0]}}, None, "must be a list"),
    ([], {"groups": [{"name": "x", "colour": 1}]}, "unknown key(s) colour"),
    ([], {"groups": [{"name": "x", "kind": "meteor"}]}, "'meteor' is not one of clean"),
    ([], {"groups": [{"name": "x", "layouts": ["2x2"]}]}, "dp<D>-pp<P>"),
    ([], {"groups": [{"name": "x", "kind": "stage-imbalance", "layouts": ["dp4-pp1"]}]},
     "pp >= 2"),
    ([], {"groups": [{"name": "x", "kind": "hang", "first_step": 1}]}, "first_step > "),
    ([], {"groups": [{"name": "x", "kind": "slow-worker", "first_step": 50}]},
     "first_step < run.steps"),
    ([], {"groups": [{"name": "x", "params": {"factor": 2}}]}, "clean group has no fault"),
    ([], {"groups": [{"name": "x"}, {"name": "x"}]}, "already used"),
    ([], {"groups": [{"name": "a/b"}]}, "name must be letters"),
    ([], {"groups": [{"name": "x", "count": 0}]}, "count must be an integer >= 1"),
    ([], {"groups": [{"name": "x", "first_step": [6, 5]}]}, "[lo, hi]"),
    ([], {"groups": [{"name": "x", "overrides": {"model": {"hidden": 30}}}]},
     "divisible by model.n_heads"),
    ([], {}, "selects no runs"),
])
def test_bad_population_is_one_clear_error(fixed, population, message):
    with pytest.raises(InputError) as e:
        expand_population(fixed, population)
    assert message in str(e.value)


def test_parse_layout():
    assert parse_layout("dp4-pp1", "x") == (4, 1)
    with pytest.raises(InputError, match="dp<D>-pp<P>"):
        parse_layout("dp0-pp2", "x")
