"""The fidelity suite driver (benchmarks/fidelity.py): plan, resume state, spread."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from stragglerlab.figures.tables import Spread
from stragglerlab.scenarios.scenario import load_scenario

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def fidelity():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("fidelity", BENCH / "fidelity.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["fidelity"] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("fidelity", None)
        sys.path.remove(str(BENCH))


def test_plan_is_seed_major_and_covers_the_groups(fidelity):
    runs = fidelity.plan(list(fidelity.DEFAULT_GROUPS), repeats=3, steps=None)
    assert len(runs) == 3 * 11
    assert [r.seed for r in runs[:11]] == [0] * 11 and runs[11].seed == 1
    names = {r.scenario for r in runs}
    assert {"clean-dp4-pp4", "slow-worker-3", "clean-dp2-pp2", "seq-rebalanced"} <= names
    for name in names | set(fidelity.GROUPS[fidelity.Group.EXTRAS]):
        load_scenario(name)  # every planned scenario exists
    with pytest.raises(ValueError):
        fidelity.plan([fidelity.Group.S6], repeats=0, steps=None)


def test_resume_state(fidelity, tmp_path):
    run = fidelity.RunSpec(scenario="clean-dp2-pp2", seed=1)
    folder = run.folder(tmp_path)
    assert folder == tmp_path / "clean-dp2-pp2" / "1"
    assert fidelity.state(folder) == "todo"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"outcome": "failed"}))
    assert fidelity.state(folder) == "todo"
    (folder / "run.json").write_text(json.dumps({"outcome": "ok"}))
    (folder / "trace.parquet").write_bytes(b"x")
    assert fidelity.state(folder) == "trained"
    (folder / "whatif").mkdir()
    (folder / "whatif" / "whatif.json").write_text("{}")
    assert fidelity.state(folder) == "done"


def test_durations_learn_from_finished_runs(fidelity, tmp_path):
    d = fidelity.Durations(tmp_path / "d.json")
    assert d.estimate("clean-dp4-pp4") == fidelity.EST_S["clean-dp4-pp4"]
    d.add("clean-dp4-pp4", 10.0)
    d.add("clean-dp4-pp4", 20.0)
    assert fidelity.Durations(tmp_path / "d.json").estimate("clean-dp4-pp4") == 15.0


def test_spread():
    s = Spread.of([1.0, 2.0, 3.0])
    assert (s.mean, s.lo, s.hi, s.n) == (2.0, 1.0, 3.0, 3) and s.sd == pytest.approx(1.0)
    assert s.cell(1) == "±1.0 (1.0–3.0)"
    assert Spread.of([5.0]).cell() == "-"
    with pytest.raises(ValueError):
        Spread.of([])


def test_peer_compute_leaves_the_victims_out_of_a_parquet_trace(fidelity, tmp_path):
    """The host-drift column reads a trace as parquet gives it (arrow-backed, read-only
    arrays): the victim's compute ops are left out, comm ops never count."""
    import fidelity_tables as tables  # beside fidelity.py, on the path the fixture sets
    import pandas as pd

    pd.DataFrame({
        "optype": ["forward-compute", "backward-compute", "forward-compute", "forward-pp-comm"],
        "dp_rank": [0, 0, 1, 1], "stage": [0, 0, 0, 0], "duration": [1.0, 3.0, 10.0, 50.0],
    }).to_parquet(tmp_path / "t.parquet")

    class Run:
        def trace(self):
            return pd.read_parquet(tmp_path / "t.parquet")

    assert tables._peer_compute_s(Run(), {(1, 0)}) == 2.0
    assert tables._peer_compute_s(Run(), set()) == pytest.approx(14 / 3)
    assert tables._peer_compute_s(Run(), {(0, 0), (1, 0)}) is None
