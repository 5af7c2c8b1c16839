"""What every rank trainer is given and what it reports: the base of our engine's
`RankTrainer` (workloads/engine.py) and of `TorchRankTrainer`, the loop of torch's own
wrappers (workloads/torch_rank.py).

A trainer is built in its rank's process (a Ray actor or a local process) from the
scenario, its global rank (stage * dp + dp_rank), the run folder, the rendezvous address,
its fault specs and the device its launcher assigned. `run(cgroup, net)` trains every
step and returns the summary the launcher collects (`summary`); on the way the trainer
writes `status/rank<r>.json` (`write_status`), which the launcher reads for progress and
hang detection. No torch here: what differs between trainers is in their modules.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from stragglerlab.run.run_folder import write_status
from stragglerlab.scenarios.faults import FaultSpec
from stragglerlab.scenarios.scenario import Scenario


class RankTrainerBase:
    """One rank's place in the job and its progress file; subclasses train."""

    def __init__(self, scenario: Scenario, rank: int, run_dir: str | Path, init_method: str,
                 fault_specs: list[FaultSpec] | None = None, device: str | None = None):
        self.sc, self.rank, self.run_dir = scenario, rank, Path(run_dir)
        self.init_method = init_method
        self.fault_specs = fault_specs or []
        # The device the launcher assigned (e.g. cuda:0 of the GPU Ray gave this actor);
        # None: no GPU was asked for, and the trainer's own rule decides.
        self.assigned_device = device
        p = scenario.parallel
        self.dp, self.pp = p.dp, p.pp
        self.stage, self.dp_rank = divmod(rank, self.dp)  # rank = stage * dp + dp_rank
        self.timeout = datetime.timedelta(seconds=scenario.run.collective_timeout_s)
        self.status_path = self.run_dir / "status" / f"rank{rank}.json"

    def run(self, cgroup: dict | None = None, net: dict | None = None) -> dict:
        """Set up, train every step, return `summary`'s dict; always undo what was set up.
        cgroup: this rank's CPU isolation; net: the run's network namespaces; None when
        unused."""
        raise NotImplementedError

    def write_status(self, step: int, started: int, loss: float | None,
                     step_time: float | None) -> None:
        """Progress for the launcher: last finished step (its loss and time, s), step under
        way."""
        write_status(self.status_path, json.dumps(
            {"rank": self.rank, "step": step, "started": started, "loss": loss,
             "step_time_s": step_time, "pid": os.getpid()}).encode())

    def summary(self, losses: dict, checksums: dict, step_times: dict) -> dict:
        """What `run` returns to the launcher (workloads.rank_actors.collect_summaries):
        per step this rank's loss (where it has one), parameter fingerprint and time, s."""
        return {"rank": self.rank, "dp_rank": self.dp_rank, "stage": self.stage,
                "backend": self.backend, "losses": losses, "param_checksums": checksums,
                "step_times_s": step_times, "pid": os.getpid()}
