"""The launchers' one lifecycle (workloads/run_lifecycle.py): what escapes a launch is
recorded, the injectors and the launcher's setups are undone in order, and the run
folder is written whatever happened. No Ray, no torch: the run folder writer is stubbed."""

from __future__ import annotations

import time

import pytest

import stragglerlab.workloads.run_lifecycle as lifecycle
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.util.interrupts import Terminated
from stragglerlab.workloads.run_lifecycle import Launch, recorded


class Injector:
    def __init__(self, name: str, events: list):
        self.name, self.events = name, events

    def on_launch(self, driver: dict) -> None:
        self.events.append(("on_launch", self.name, driver.get("pids")))

    def on_finish(self, driver: dict) -> None:
        self.events.append(("on_finish", self.name, driver.get("pids")))


@pytest.fixture
def launch(tmp_path, monkeypatch):
    """A Launch of a real scenario whose run folder write is recorded, not done."""
    events: list = []

    def write(run_dir, scenario, record, injectors):
        events.append(("write", sorted(record)))
        return {**record, "written": True}

    monkeypatch.setattr(lifecycle, "write_run_folder", write)
    scenario = load_scenario("clean-dp2-pp2")
    made = Launch(scenario=scenario, run_dir=tmp_path, injectors=[Injector("a", events)],
                  record={"outcome": "failed", "error": None}, t_start=time.time() - 2.0)
    made.events = events
    return made


def test_a_clean_launch_undoes_in_reverse_and_writes_the_record(launch):
    with recorded(launch):
        launch.on_teardown(lambda: launch.events.append(("undo", "ray")))
        launch.launched({"pids": [11, 12]})
        launch.on_teardown(lambda: launch.events.append(("undo", "cgroups")))
        launch.summaries[0] = {"backend": "gloo", "losses": {}, "param_checksums": {},
                               "step_times_s": {0: 0.5}}
        launch.record.update(outcome="ok", wall_s={"train": 1.0})
    assert launch.events[:4] == [("on_launch", "a", [11, 12]), ("on_finish", "a", [11, 12]),
                                 ("undo", "cgroups"), ("undo", "ray")]
    assert launch.events[4][0] == "write"
    record = launch.record
    assert record["written"] and record["outcome"] == "ok" and record["error"] is None
    assert record["wall_s"]["train"] == 1.0 and record["wall_s"]["total"] >= 2.0
    assert record["backend"] == "gloo" and record["ranks_finished"] == [0]
    assert record["faults_requested"] == 1


def test_a_failure_outside_the_ranks_is_recorded_not_raised(launch):
    with recorded(launch):
        launch.on_teardown(lambda: launch.events.append(("undo", "ray")))
        raise RuntimeError("the cluster has no room for 4 bundles")
    assert launch.record["error"] == {"rank": None, "kind": "RuntimeError",
                                      "message": "the cluster has no room for 4 bundles"}
    # Never launched: the injectors still finish, with an empty driver.
    assert launch.events[:2] == [("on_finish", "a", None), ("undo", "ray")]
    assert launch.record["written"]


def test_a_ranks_error_already_recorded_is_kept(launch):
    rank_error = {"rank": 3, "kind": "worker-died", "message": "dead"}
    with recorded(launch):
        launch.record["error"] = rank_error
        raise ConnectionError("a later failure while stopping")
    assert launch.record["error"] == rank_error


def test_an_interrupt_is_recorded_and_still_stops_the_command(launch):
    with pytest.raises(KeyboardInterrupt), recorded(launch):
        launch.on_teardown(lambda: launch.events.append(("undo", "ray")))
        raise Terminated("SIGTERM")  # what the SIGTERM handler raises
    assert launch.record["error"] == {"rank": None, "kind": "interrupted", "message": "SIGTERM"}
    assert ("undo", "ray") in launch.events and launch.record["written"]
