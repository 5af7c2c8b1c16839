"""The rank actors of a run, shared by the private launch and the cluster run.

`workloads.launcher` (one private Ray) and `workloads.cluster` (an existing
cluster) place and set up ranks differently, then run them the same way, with
what is here: the Ray actor class that holds one `RankTrainer`, the wait for
every rank (the first failure or a hang is the run's error) and the run.json
fields collected from the ranks' summaries. Both drivers import this module and
neither imports the other's internals (contracts in pyproject.toml); the
lifecycle they run a launch in is workloads/run_lifecycle.py.

    actor_cls = rank_actor_class()
    error = wait_for_ranks(ray, futures, summaries, run_dir, scenario, say)
    record.update(collect_summaries(summaries, scenario))
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.run.run_folder import RunFolder
from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.workloads.placement import rank_device

Progress = Callable[[str], None]
POLL_S = 0.1
# Extra slack over the collective timeout before a run without progress is called hung.
HANG_SLACK_S = 30.0
HANG_STEPS = 2.0
"""A run is also not called hung before this many of its longest step so far, times the
largest slow-worker factor it injects: a paced DP 4 x PP 4 step takes ~45 s on 2 cores,
and a 2.36x victim makes it ~100 s, past the collective timeout's 90 s."""


def hang_after_s(scenario: Scenario, longest_step_s: float) -> float:
    """Seconds without a finished step after which the run is called hung."""
    factor = max([float((f.get("params") or {}).get("factor", 1.0)) for f in scenario.faults
                  if isinstance(f, dict) and f.get("kind") == "slow-worker"] or [1.0])
    return max(scenario.run.collective_timeout_s + HANG_SLACK_S,
               HANG_STEPS * longest_step_s * factor)


# glibc malloc for the rank processes: tensors up to 32 MB come from the heap and freed
# memory is never trimmed, so every step reuses mapped pages. Without it a rank faults
# in ~1,300 fresh zeroed pages per step (activations above the dynamic mmap threshold),
# CPU time that lands inside random ops (benchmarks/README.md, "Timing noise"). Both
# are needed: a trim threshold alone pins the mmap threshold at 128 kB (22,000 faults).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),
              "MALLOC_TRIM_THRESHOLD_": str(1024 * 1024 * 1024)}


def rank_actor_class():
    """The Ray actor class of one rank (Ray is imported only when a run starts)."""
    import ray

    @ray.remote(max_restarts=0)
    class RankActor:
        """Holds one RankTrainer in its own process."""

        def __init__(self, scenario: Scenario, rank: int, run_dir: str, init_method: str,
                     fault_specs: list, env: dict | None = None):
            # Here, in the rank's process: the driver never imports torch.
            from stragglerlab.workloads.node_helper import node_run_dir
            from stragglerlab.workloads.trainers import trainer_class

            os.environ.update(env or {})  # e.g. GLOO_SOCKET_IFNAME on a cluster node
            gpu_ids = ray.get_gpu_ids()
            # The GPU Ray assigned, never cuda:<rank>; None: no GPU asked, the engine decides.
            self.device = rank_device(gpu_ids, os.environ.get("CUDA_VISIBLE_DEVICES")) \
                if gpu_ids else None
            # Our engine, or a torch wrapper's trainer (scenario `workload`).
            self.trainer = trainer_class(scenario.workload)(
                scenario, rank, str(node_run_dir(run_dir)), init_method, fault_specs,
                device=self.device)

        def pid(self) -> int:
            return os.getpid()

        def where(self) -> dict:
            return {"pid": os.getpid(), "device": self.device or "cpu"}

        def run(self, cgroup: dict | None, net: dict | None) -> dict:
            return self.trainer.run(cgroup, net)

    return RankActor


def rank_status(run_dir: Path, world: int) -> dict[int, dict]:
    """Per-rank progress of the ranks of this run (status files mid-write are skipped)."""
    return {r: s for r, s in RunFolder(path=run_dir).status().items() if r < world}


@dataclass(kw_only=True)
class StepWatch:
    """The ranks' progress, read once per poll: a `step k/N` line per step every rank
    finished, and the run's hang error when none finished for `hang_after_s`. Shared by
    the Ray launchers' wait and the local launcher's (workloads/local_launcher.py)."""

    scenario: Scenario
    """The run's scenario (world size, steps, the hang timeout's inputs)."""
    say: Progress
    """Where progress lines go."""
    last_step: int = -1
    """The last step every rank finished."""
    last_change: float = field(default_factory=time.time)
    """When it last moved (time.time())."""
    longest: float = 0.0
    """The longest step time seen, s (the hang timeout grows with it)."""

    def check(self, status: dict[int, dict]) -> dict | None:
        """Take the ranks' `status`; the run's hang error, else None."""
        world = self.scenario.world_size
        step = min((s["step"] for s in status.values()), default=-1) if len(status) == world \
            else -1
        hang_after = hang_after_s(self.scenario, self.longest)
        if step != self.last_step:
            self.last_step, self.last_change = step, time.time()
            loss = [s["loss"] for s in status.values() if s.get("loss") is not None]
            times = [s["step_time_s"] or 0.0 for s in status.values()]
            self.longest = max([self.longest, *times])
            self.say(f"step {step + 1}/{self.scenario.run.steps}  loss "
                     f"{sum(loss) / max(len(loss), 1):.3f}  step time {1000 * max(times):.0f} ms")
        elif time.time() - self.last_change > hang_after:
            behind = sorted(r for r in range(world) if status.get(r, {}).get("step", -1) <= step)
            self.say(f"no progress for {hang_after:.0f}s; ranks {behind} are behind")
            return {"rank": behind[0] if behind else None, "kind": "hang",
                    "message": f"no step finished for {hang_after:.0f}s; behind: {behind}"}
        return None


def laggard(status: dict[int, dict], world: int) -> int | None:
    """The rank that started the fewest steps, when it is behind the others: a peer's
    timeout usually means that rank stopped. None when all are level."""
    started = {r: status.get(r, {}).get("started", -1) for r in range(world)}
    behind = min(started, key=lambda r: (started[r], r))
    return behind if started[behind] < max(started.values()) else None


def wait_for_ranks(ray, futures: dict, summaries: dict, run_dir: Path, scenario: Scenario,
                   say: Progress, read_status: Callable[[], dict] | None = None) -> dict | None:
    """Wait for every rank; the first failure (or a hang) is returned as the run's error.
    read_status: the ranks' progress (default: the status files in run_dir)."""
    world = scenario.world_size
    read_status = read_status or (lambda: rank_status(run_dir, world))
    pending = list(futures)
    watch = StepWatch(scenario=scenario, say=say)
    while pending:
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
        # Deaths first: when a rank dies, its peers' errors may arrive in the same batch.
        done = sorted(done, key=lambda r: not _is_dead(ray, r))
        for ref in done:
            rank = futures[ref]
            try:
                summaries[rank] = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - RayActorError, RayTaskError, ...
                dead = isinstance(e, ray.exceptions.RayActorError)
                error = {"rank": rank, "kind": "worker-died" if dead else "worker-error",
                         "message": _first_line(e), "reported_by": rank,
                         "detected_after_s": round(time.time() - watch.last_change, 3)}
                if not dead:
                    # A peer's error often comes first when another rank died: give Ray a
                    # moment to report a death, which is then the root cause.
                    others = [f for f in pending if futures[f] != rank]
                    for ref2 in ray.wait(others, num_returns=len(others), timeout=3.0)[0]:
                        try:
                            ray.get(ref2)
                        except ray.exceptions.RayActorError as e2:
                            error.update(rank=futures[ref2], kind="worker-died",
                                         message=_first_line(e2))
                            say(f"rank {error['rank']} failed (worker-died); stopping the run")
                            return error
                        except Exception:  # noqa: BLE001, S110 - another peer's error
                            pass
                    behind = laggard(read_status(), world)
                    if behind is not None:
                        error.update(rank=behind, kind="hang")
                say(f"rank {error['rank']} failed ({error['kind']}); stopping the run")
                return error
        hang = watch.check(read_status())
        if hang is not None:
            return hang
    return None


def _is_dead(ray, ref) -> bool:
    """Whether a finished rank task failed because its actor died."""
    try:
        ray.get(ref, timeout=0)
    except ray.exceptions.RayActorError:
        return True
    except Exception:  # noqa: BLE001 - any other outcome is not a death
        return False
    return False


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    tail = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (tail[-1] if tail else lines[0] if lines else type(e).__name__)[:1000]


def collect_summaries(summaries: dict, scenario: Scenario) -> dict:
    """Losses, DP-replica parameter checksums and step times from the rank summaries."""
    dp, pp = scenario.parallel.dp, scenario.parallel.pp
    losses: dict[str, float] = {}
    for rank, s in summaries.items():
        if rank // dp == pp - 1:
            for step, loss in s["losses"].items():
                losses[str(step)] = losses.get(str(step), 0.0) + loss / dp
    checksums = {str(stage): {} for stage in range(pp)}
    for rank, s in sorted(summaries.items()):
        for step, digest in s["param_checksums"].items():
            checksums[str(rank // dp)].setdefault(str(step), []).append(digest)
    rank0 = summaries.get(0, {})
    return {"backend": rank0.get("backend"), "loss": losses, "dp_param_checksums": checksums,
            "step_time_s": {str(k): v for k, v in rank0.get("step_times_s", {}).items()},
            "ranks_finished": sorted(summaries)}
