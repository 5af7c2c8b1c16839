"""torch.profiler (Kineto) beside our tracer: scenario `run: {profiler: kineto}`.

Profiles the traced steps of one rank (the warm-up steps are the profiler's
wait/warm-up), CPU activities plus CUDA on a GPU, and writes the rank's
Chrome trace to `<run>/kineto/rank<r>.json.gz` when the last step ends. The
tracer wraps every op in `record_function(<optype>)` (workloads/tracer.py), so
`stragglerlab import kineto --traces <run>/kineto` rebuilds our trace from it
(the cross-check of the importer). `profile_all_threads` lets the P2P watcher
threads close the ranges of async sends/recvs they complete.

    prof = KinetoProfiler.for_scenario(scenario, rank, run_dir, device)
    prof.start(); ...; prof.step()  # after every step
    prof.stop()
"""

from __future__ import annotations

from pathlib import Path

import torch

from stragglerlab.run.run_folder import KINETO_DIR
from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.scenarios.scenario_vocab import Profiler


class KinetoProfiler:
    """One rank's torch.profiler over steps [warmup_steps, steps)."""

    def __init__(self, scenario: Scenario, rank: int, run_dir: str | Path,
                 device: torch.device) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        run = scenario.run
        self.path = Path(run_dir) / KINETO_DIR / f"rank{rank}.json.gz"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        warm = 1 if run.warmup_steps >= 1 else 0
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=max(run.warmup_steps - 1, 0), warmup=warm,
                              active=run.steps - run.warmup_steps, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(self.path)),
            # Shapes keep c10d::send / recv_'s scalar args: a gloo trace's only P2P peers.
            record_shapes=True,
            experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True),
        )
        self.running = False

    @classmethod
    def for_scenario(cls, scenario: Scenario, rank: int, run_dir: str | Path,
                     device: torch.device) -> KinetoProfiler | None:
        """A profiler when the scenario asks for one, else None."""
        if scenario.run.profiler is Profiler.KINETO:
            return cls(scenario, rank, run_dir, device)
        return None

    def start(self) -> None:
        """Start (before the first step)."""
        self._prof.start()
        self.running = True

    def step(self) -> None:
        """Mark the end of a training step."""
        self._prof.step()

    def stop(self) -> None:
        """Stop; writes the trace if the active steps did not already."""
        if self.running:
            self.running = False
            self._prof.stop()
