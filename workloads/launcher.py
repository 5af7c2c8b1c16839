"""Launch one training run on Ray: one actor per rank, each its own CPU share, one run folder.

* Ray: our own local instance (`address="local"`; shut down at the end, never
  `ray stop`), one actor per rank in a STRICT_PACK placement group; the
  project is importable in the actors because they run this environment's
  interpreter. With `ray_address` the run attaches to that cluster instead
  (workloads/cluster.py: placement over nodes, per-node host setup, one clock).
* Rendezvous: TCP on loopback, a free port picked by the driver.
* Private: Ray runs with node IP 127.0.0.1 and no dashboard, so no Ray server
  and no rank socket listens outside loopback (tests/e2e/test_ray_private.py).
* Isolation: with root and cgroup v1, every rank gets a fixed CPU quota
  (workloads.isolation), so a rank behaves like its own device; otherwise
  the run says so and goes on unisolated (the named fallback).
* Failure: a dead actor, a rank's exception (e.g. a collective timeout) or no
  progress for longer than the collective timeout ends the run: every actor is
  killed, the cgroups are removed, and run.json says `failed`, which rank and
  why; the trace keeps every step all ranks finished.

    outcome = launch(scenario, "results/clean-dp2-pp2/0", progress=print)
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from stragglerlab import run_folder as rf
from stragglerlab.faults import parse_faults
from stragglerlab.host import netns
from stragglerlab.host.cgroups import CpuIsolation, quota_for
from stragglerlab.host.residue import clean_residue, forget_ray_node, mark_driver, record_ray_node
from stragglerlab.injectors.registry import build_injectors
from stragglerlab.interrupts import interrupt_message, keep_sigterm_handler
from stragglerlab.run_folder import RunFolder
from stragglerlab.scenario import Scenario, scenario_to_dict
from stragglerlab.workloads import placement as pl
from stragglerlab.workloads.run_folder import write_run_folder

Progress = Callable[[str], None]
POLL_S = 0.1
LOOPBACK = "127.0.0.1"
"""The only address a run's Ray processes and rank sockets listen on."""
CPU_HEADROOM = 0.9
# Extra slack over the collective timeout before a run without progress is called hung.
HANG_SLACK_S = 30.0


# glibc malloc for the rank processes: tensors up to 32 MB come from the heap and freed
# memory is never trimmed, so every step reuses mapped pages. Without it a rank faults
# in ~1,300 fresh zeroed pages per step (activations above the dynamic mmap threshold),
# CPU time that lands inside random ops (benchmarks/README.md, "Timing noise"). Both
# are needed: a trim threshold alone pins the mmap threshold at 128 kB (22,000 faults).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),
              "MALLOC_TRIM_THRESHOLD_": str(1024 * 1024 * 1024)}


def interrupted_error(exc: KeyboardInterrupt) -> dict:
    """run.json `error` of a run stopped by Ctrl-C or SIGTERM (message: which of them)."""
    return {"rank": None, "kind": "interrupted", "message": interrupt_message(exc)}


def launch_error(exc: Exception) -> dict:
    """run.json `error` of a launch that failed outside the ranks."""
    return {"rank": None, "kind": type(exc).__name__, "message": str(exc)[:2000]}


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _versions() -> dict:
    from importlib.metadata import version

    import ray
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "ray": ray.__version__, "stragglerlab": version("stragglerlab")}


def _rank_actor_class():
    import ray

    @ray.remote(max_restarts=0)
    class RankActor:
        """Holds one RankTrainer in its own process."""

        def __init__(self, scenario: Scenario, rank: int, run_dir: str, init_method: str,
                     fault_specs: list, env: dict | None = None):
            from stragglerlab.workloads.engine import RankTrainer
            from stragglerlab.workloads.placement import rank_device

            os.environ.update(env or {})  # e.g. GLOO_SOCKET_IFNAME on a cluster node
            gpu_ids = ray.get_gpu_ids()
            # The GPU Ray assigned, never cuda:<rank>; None: no GPU asked, the engine decides.
            self.device = rank_device(gpu_ids, os.environ.get("CUDA_VISIBLE_DEVICES")) \
                if gpu_ids else None
            self.trainer = RankTrainer(scenario, rank, run_dir, init_method, fault_specs,
                                       device=self.device)

        def pid(self) -> int:
            return os.getpid()

        def where(self) -> dict:
            return {"pid": os.getpid(), "device": self.device or "cpu"}

        def run(self, cgroup: dict | None, net: dict | None) -> dict:
            return self.trainer.run(cgroup, net)

    return RankActor


@contextlib.contextmanager
def _loopback_node(ray):
    """Let ray.init keep node IP 127.0.0.1.

    Ray (2.x) turns a loopback `_node_ip_address` into the host's reachable IP
    (services.resolve_ip_for_localhost), and its servers then listen on all
    interfaces; with the node IP left at 127.0.0.1 the GCS, raylet, object
    manager, agents and workers all bind loopback (checked by
    tests/e2e/test_ray_private.py).
    """
    services = ray._private.services
    original = getattr(services, "resolve_ip_for_localhost", None)
    if original is not None:
        services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        if original is not None:
            services.resolve_ip_for_localhost = original


def _read_status(run_dir: Path, world: int) -> dict[int, dict]:
    """Per-rank progress of the ranks of this run (status files mid-write are skipped)."""
    return {r: s for r, s in RunFolder(path=run_dir).status().items() if r < world}


def _prepare_dir(run_dir: Path) -> None:
    """Start from a clean run folder (outputs of an earlier run there are replaced)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for sub in (rf.TRACE_PARTS_DIR, rf.STATUS_DIR, rf.GC_DIR):
        shutil.rmtree(run_dir / sub, ignore_errors=True)
    for name in (rf.TRACE_PARQUET, rf.RUN_JSON, rf.FAULTS_JSON, rf.META_YAML):
        (run_dir / name).unlink(missing_ok=True)


def prepare_faults(scenario: Scenario, where: str = "scenario") -> tuple[Scenario, list, list]:
    """(scenario as the faults shape it, fault specs, injectors); InputError on a bad fault."""
    specs = parse_faults(scenario.faults, scenario.parallel.dp, scenario.parallel.pp,
                         scenario.run.steps, where)
    injectors = build_injectors(specs, where)
    for inj in injectors:
        scenario = inj.shape_scenario(scenario)
    return scenario, specs, injectors


def launch(scenario: Scenario, out: str | Path, progress: Progress | None = None,
           ray_address: str | None = None) -> dict:
    """Run the scenario; returns run.json's content (outcome 'ok' or 'failed').

    ray_address: attach to that Ray cluster (workloads.cluster) instead of starting
    a private local instance."""
    import ray

    say = progress or (lambda _msg: None)
    scenario, specs, injectors = prepare_faults(scenario)
    run_dir = Path(out).resolve()
    _prepare_dir(run_dir)
    world = scenario.world_size
    record: dict = {"scenario": scenario_to_dict(scenario), "name": scenario.name,
                    "seed": scenario.run.seed, "versions": _versions(), "outcome": "failed",
                    "error": None, "host": platform.node()}
    t_start = time.time()
    # Every start: what an earlier killed run left (processes, cgroups, namespaces).
    residue = clean_residue()
    if residue["processes"]:
        say(f"killed {len(residue['processes'])} processes left by an earlier killed run")
    if residue["netns_skipped"]:
        say(f"network namespace cleanup skipped: {residue['netns_skipped']}")
    if ray_address:
        from stragglerlab.workloads.cluster import run_on_cluster

        return run_on_cluster(scenario, run_dir, ray_address, specs, injectors, record, say,
                              t_start)
    mark_driver()
    iso, summaries = None, {}
    try:
        # Private: every Ray server (GCS, raylet, object manager, agents, workers) binds the
        # node IP, here loopback; gloo/NCCL use `lo` unless a rank has its own namespace.
        with _loopback_node(ray), keep_sigterm_handler():
            ray.init(address="local", num_cpus=max(world, os.cpu_count() or 1),
                     _node_ip_address=LOOPBACK, include_dashboard=False,
                     logging_level=logging.ERROR, log_to_driver=False,
                     object_store_memory=100 * 1024 * 1024,
                     runtime_env={"env_vars": {"OMP_NUM_THREADS": "1",
                                               "PYTHONWARNINGS": "ignore::FutureWarning",
                                               "GLOO_SOCKET_IFNAME": "lo",
                                               "NCCL_SOCKET_IFNAME": "lo", **MALLOC_ENV}})
        node_note = record_ray_node(ray.get_runtime_context().get_node_id())
        t_ray = time.time()
        say(f"ray started in {t_ray - t_start:.1f}s; launching {world} ranks")
        # One bundle per rank, + a GPU each on CUDA: each rank then uses the GPU Ray gave it.
        gpu = pl.wants_gpu(scenario.run.backend, ray.cluster_resources().get("GPU", 0), world)
        pg = ray.util.placement_group(pl.bundles(world, 1, gpu),
                                      strategy=pl.ray_strategy(scenario.run.placement, True))
        ray.get(pg.ready(), timeout=120)
        actor_cls = _rank_actor_class()
        init_method = f"tcp://127.0.0.1:{free_port()}"
        actors = [actor_cls.options(num_cpus=1, num_gpus=1 if gpu else 0,
                                    placement_group=pg).remote(
            scenario, rank, str(run_dir), init_method, specs) for rank in range(world)]
        where = ray.get([a.where.remote() for a in actors], timeout=300)
        pids = [w["pid"] for w in where]
        node = ray.get_runtime_context().get_node_id()
        record["placement"] = pl.placement_map(list(range(world)), [node] * world,
                                               {node: LOOPBACK}, [w["device"] for w in where])
        iso, record["isolation"] = _isolate(scenario, run_dir.name, pids, say)
        driver = {"pids": pids, "isolation": iso, "run_dir": run_dir, "say": say}
        for inj in injectors:
            inj.on_launch(driver)
        cgroups = [None if iso is None else {
            "cpu_dir": str(iso.rank_cpu_dir(r)), "period_us": record["isolation"]["period_us"],
            "cores": record["isolation"]["cores_per_rank"]} for r in range(world)]
        topo, net, record["network"] = _network(injectors, world, say)
        futures = {a.run.remote(cgroups[rank], net): rank for rank, a in enumerate(actors)}
        t_run = time.time()
        record["error"] = _wait(ray, futures, summaries, run_dir, scenario, say)
        record["outcome"] = "failed" if record["error"] else "ok"
        if record["error"]:
            for a in actors:
                ray.kill(a, no_restart=True)
        record["wall_s"] = {"ray_start": t_ray - t_start, "train": time.time() - t_run}
    except KeyboardInterrupt as e:
        record["error"] = interrupted_error(e)
        raise
    except Exception as e:  # noqa: BLE001 - any launch failure is recorded, not lost
        record["error"] = record["error"] or launch_error(e)
    finally:
        for inj in injectors:
            inj.on_finish(driver if "driver" in locals() else {})
        if locals().get("topo") is not None:
            topo.destroy()
        if iso is not None:
            iso.cleanup()
        if ray.is_initialized():
            ray.shutdown()
            forget_ray_node(locals().get("node_note"))
        record["wall_s"] = dict(record.get("wall_s", {}), total=time.time() - t_start)
        record.update(_collect(summaries, scenario))
        record["faults_requested"] = len(injectors)
        record = write_run_folder(run_dir, scenario, record, injectors)
    return record


def _network(injectors: list, world: int, say: Progress):
    """Per-rank network namespaces when a fault shapes traffic, else loopback."""
    if not any(inj.needs_netns for inj in injectors):
        return None, None, {"namespaces": False, "reason": "no network fault"}
    ok, why = netns.available()
    if not ok:
        say(f"network namespaces unavailable ({why}): in-process fallback")
        return None, None, {"namespaces": False, "reason": why}
    run_id = f"r{os.getpid()}_{int(time.time()) % 100000}"
    topo = netns.NetTopology(run_id, world).create()
    say(f"{world} ranks on their own veths (network namespaces sl-{run_id}-*)")
    net = {"run_id": run_id, "world": world, "port": 29500}
    return topo, net, {"namespaces": True, "run_id": run_id,
                       "subnet": topo.rank_address(0).rsplit(".", 1)[0] + ".0/24"}


def _isolate(scenario: Scenario, run_name: str, pids: list[int], say: Progress):
    """Give each rank its CPU share, or say why not."""
    run = scenario.run
    if not run.cpu_isolation:
        return None, {"enabled": False, "reason": "disabled by run.cpu_isolation"}
    ok, why = CpuIsolation.available()
    if not ok:
        say(f"CPU isolation off ({why}): ranks share the cores unisolated")
        return None, {"enabled": False, "reason": why}
    # By default 90% of the machine is dealt out: quotas are caps, not guarantees, so the
    # rest is left to Ray, the driver and the OS instead of being taken from the ranks.
    cores = run.cores_per_rank or CPU_HEADROOM * (os.cpu_count() or 1) / len(pids)
    # Many ranks on few cores: the period grows so each quota stays above the kernel's
    # 1 ms floor (the share is the same, the throttling granularity coarser).
    period_us, _ = quota_for(cores, run.cpu_period_us)
    run_id = f"{run_name}-{os.getpid()}-{int(time.time())}"
    iso = CpuIsolation.create(run_id, len(pids), cores, period_us=period_us)
    for rank, pid in enumerate(pids):
        iso.assign(rank, pid)
    say(f"each rank isolated at {cores:.2f} cores (cgroup v1 quota, period {period_us} us)")
    return iso, {"enabled": True, "cores_per_rank": cores, "period_us": period_us,
                 "cgroup_run_id": run_id}


def _wait(ray, futures: dict, summaries: dict, run_dir: Path, scenario: Scenario,
          say: Progress, read_status: Callable[[], dict] | None = None) -> dict | None:
    """Wait for every rank; the first failure (or a hang) is returned as the run's error.
    read_status: the ranks' progress (default: the status files in run_dir)."""
    world, steps = scenario.world_size, scenario.run.steps
    read_status = read_status or (lambda: _read_status(run_dir, world))
    pending = list(futures)
    last_step, last_change = -1, time.time()
    hang_after = scenario.run.collective_timeout_s + HANG_SLACK_S
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
                         "detected_after_s": round(time.time() - last_change, 3)}
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
                    # A peer's timeout usually means another rank stopped: blame the laggard.
                    status = read_status()
                    started = {r: status.get(r, {}).get("started", -1) for r in range(world)}
                    laggard = min(started, key=lambda r: (started[r], r))
                    if started[laggard] < max(started.values()):
                        error.update(rank=laggard, kind="hang")
                say(f"rank {error['rank']} failed ({error['kind']}); stopping the run")
                return error
        status = read_status()
        step = min((s["step"] for s in status.values()), default=-1) if len(status) == world \
            else -1
        if step != last_step:
            last_step, last_change = step, time.time()
            loss = [s["loss"] for s in status.values() if s.get("loss") is not None]
            times = [s["step_time_s"] or 0.0 for s in status.values()]
            say(f"step {step + 1}/{steps}  loss {sum(loss) / max(len(loss), 1):.3f}  "
                f"step time {1000 * max(times):.0f} ms")
        elif time.time() - last_change > hang_after:
            behind = sorted(r for r in range(world) if status.get(r, {}).get("step", -1) <= step)
            say(f"no progress for {hang_after:.0f}s; ranks {behind} are behind")
            return {"rank": behind[0] if behind else None, "kind": "hang",
                    "message": f"no step finished for {hang_after:.0f}s; behind: {behind}"}
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


def _collect(summaries: dict, scenario: Scenario) -> dict:
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
