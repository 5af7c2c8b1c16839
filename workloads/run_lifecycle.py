"""The lifecycle every launcher runs a job in: what fails is recorded, what was set up is
undone, and the run folder is written, whatever happened.

The private Ray launch (`workloads.launcher`), the cluster run (`workloads.cluster`) and
the plain-process launch (`workloads.local_launcher`) set ranks up differently; around
that they do the same, here:

* an error escaping the launch becomes run.json `error` (`launch_error`), not lost; a
  rank's error the wait already recorded is kept;
* Ctrl-C or SIGTERM is recorded as `interrupted` and still stops the command;
* while it runs, driver.json names the driver (host, process, scenario): a driver killed
  with SIGKILL leaves it, and the reading verbs finish such a folder as a failed run with
  its finished steps (`workloads.killed_run`);
* then, in this order: every injector's `on_finish`, the launcher's own teardowns
  (last set up, first undone), the total wall time, the ranks' summaries, and
  `write_run_folder` (trace, meta, ground truth, run.json).

    job = Launch(scenario=scenario, run_dir=run_dir, record=record, injectors=injectors,
                 t_start=t_start)
    with recorded(job):
        ...                                   # start ranks; job.launched(driver)
        job.on_teardown(lambda: ray.shutdown())
        record["error"] = wait_for_ranks(ray, futures, job.summaries, ...)
    return job.record
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.run.run_folder import DRIVER_JSON
from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.util.interrupts import interrupt_message
from stragglerlab.workloads.killed_run import write_driver_record
from stragglerlab.workloads.rank_actors import collect_summaries
from stragglerlab.workloads.run_folder import write_run_folder


def interrupted_error(exc: KeyboardInterrupt) -> dict:
    """run.json `error` of a run stopped by Ctrl-C or SIGTERM (message: which of them)."""
    return {"rank": None, "kind": "interrupted", "message": interrupt_message(exc)}


def launch_error(exc: Exception) -> dict:
    """run.json `error` of a launch that failed outside the ranks."""
    return {"rank": None, "kind": type(exc).__name__, "message": str(exc)[:2000]}


@dataclass(kw_only=True)
class Launch:
    """One launch in progress: run.json's record as it fills, and what finishing it needs."""

    scenario: Scenario
    """The run's scenario, as its faults shaped it."""
    run_dir: Path
    """The run folder written at the end."""
    record: dict
    """run.json's content so far (outcome, error, placement, ...); after `recorded`, what
    write_run_folder wrote."""
    injectors: list
    """The run's fault injectors: each is told when the ranks run and when the run ends."""
    t_start: float
    """When the launch began (time.time()), for wall_s.total."""
    summaries: dict = field(default_factory=dict)
    """rank -> the summary its trainer returned (filled by the launcher's wait)."""
    driver: dict | None = None
    """What the injectors were given at launch (pids, isolation, run_dir, say); None
    until the ranks run."""
    teardowns: list[Callable[[], None]] = field(default_factory=list)
    """The launcher's own undo steps, in the order their setups happened."""

    def launched(self, driver: dict) -> None:
        """The ranks run: every injector acts (on_launch); on_finish is then certain."""
        self.driver = driver
        for inj in self.injectors:
            inj.on_launch(driver)

    def on_teardown(self, undo: Callable[[], None]) -> None:
        """Undo a setup when the run ends, after the injectors' on_finish and before the
        later setups' undos (last set up, first undone)."""
        self.teardowns.append(undo)


@contextlib.contextmanager
def recorded(launch: Launch) -> Iterator[Launch]:
    """Run the launch's body; record what escapes it, undo, write the run folder."""
    record = launch.record
    write_driver_record(launch.run_dir, launch.scenario)
    try:
        yield launch
    except KeyboardInterrupt as e:
        record["error"] = interrupted_error(e)
        raise
    except Exception as e:  # noqa: BLE001 - any launch failure is recorded, not lost
        record["error"] = record["error"] or launch_error(e)
    finally:
        for inj in launch.injectors:
            inj.on_finish(launch.driver or {})
        for undo in reversed(launch.teardowns):
            undo()
        record["wall_s"] = dict(record.get("wall_s", {}), total=time.time() - launch.t_start)
        record.update(collect_summaries(launch.summaries, launch.scenario))
        record["faults_requested"] = len(launch.injectors)
        launch.record = write_run_folder(launch.run_dir, launch.scenario, record,
                                         launch.injectors)
        (launch.run_dir / DRIVER_JSON).unlink(missing_ok=True)
