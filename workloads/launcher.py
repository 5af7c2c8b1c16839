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
  why; the trace keeps every step all ranks finished. The rank actors and the
  wait for them are workloads/rank_actors.py, shared with cluster runs; the
  error-recording lifecycle is workloads/run_lifecycle.py, shared by every launcher.

    outcome = launch(scenario, "results/clean-dp2-pp2/0", progress=print)
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import time
from pathlib import Path

from stragglerlab.host import netns
from stragglerlab.host.cgroups import CpuIsolation, quota_for
from stragglerlab.host.residue import clean_residue, forget_ray_node, mark_driver, record_ray_node
from stragglerlab.injectors.registry import build_injectors
from stragglerlab.run import run_folder as rf
from stragglerlab.scenarios.faults import parse_faults
from stragglerlab.scenarios.scenario import Scenario, scenario_to_dict
from stragglerlab.util.interrupts import keep_sigterm_handler
from stragglerlab.workloads import placement as pl
from stragglerlab.workloads.cluster import run_on_cluster
from stragglerlab.workloads.cpu_share import default_cores
from stragglerlab.workloads.ports import rendezvous_port
from stragglerlab.workloads.rank_actors import (
    MALLOC_ENV,
    Progress,
    rank_actor_class,
    wait_for_ranks,
)
from stragglerlab.workloads.run_lifecycle import Launch, recorded

LOOPBACK = "127.0.0.1"
"""The only address a run's Ray processes and rank sockets listen on."""


def _versions() -> dict:
    import ray
    import torch

    from stragglerlab.util.package_version import package_version

    return {"python": platform.python_version(), "torch": torch.__version__,
            "ray": ray.__version__, "stragglerlab": package_version()}


def prepare_run_dir(run_dir: Path, keep_monitor: bool = False) -> None:
    """Start from a clean run folder (outputs of an earlier run there are replaced, and so
    are the what-if, findings and monitor history made from its trace). keep_monitor: a
    monitor already started beside this run (`train --monitor`) writes monitor/."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # kineto/ and compute/ too: a torch workload's import reads every rank file there.
    derived = (rf.WHATIF_DIR, rf.DETECT_DIR, rf.PLOT_DIR) + (() if keep_monitor
                                                           else (rf.MONITOR_DIR,))
    for sub in (rf.TRACE_PARTS_DIR, rf.STATUS_DIR, rf.GC_DIR, rf.KINETO_DIR, rf.COMPUTE_DIR,
                rf.CPU_DIR, *derived):
        shutil.rmtree(run_dir / sub, ignore_errors=True)
    for name in (rf.TRACE_PARQUET, rf.RUN_JSON, rf.FAULTS_JSON, rf.META_YAML, rf.DRIVER_JSON):
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
           ray_address: str | None = None, keep_monitor: bool = False) -> dict:
    """Run the scenario; returns run.json's content (outcome 'ok' or 'failed').

    ray_address: attach to that Ray cluster (workloads.cluster) instead of starting
    a private local instance. keep_monitor: a monitor beside the run already writes the
    folder's monitor/ (prepare_run_dir)."""
    import ray

    say = progress or (lambda _msg: None)
    scenario, specs, injectors = prepare_faults(scenario)
    run_dir = Path(out).resolve()
    prepare_run_dir(run_dir, keep_monitor=keep_monitor)
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
        return run_on_cluster(scenario, run_dir, ray_address, specs, injectors, record, say,
                              t_start)
    mark_driver()
    job = Launch(scenario=scenario, run_dir=run_dir, record=record, injectors=injectors,
                    t_start=t_start)
    node_note = None
    job.on_teardown(lambda: _shutdown_ray(ray, node_note))  # undone last
    with recorded(job):
        # Private: every Ray server (GCS, raylet, object manager, agents, workers) binds the
        # node IP, here loopback; gloo/NCCL use `lo` unless a rank has its own namespace.
        with pl.loopback_node(ray), keep_sigterm_handler():
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
        actor_cls = rank_actor_class()
        init_method = f"tcp://{LOOPBACK}:{rendezvous_port(LOOPBACK)}"
        actors = [actor_cls.options(num_cpus=1, num_gpus=1 if gpu else 0,
                                    placement_group=pg).remote(
            scenario, rank, str(run_dir), init_method, specs) for rank in range(world)]
        where = ray.get([a.where.remote() for a in actors], timeout=300)
        pids = [w["pid"] for w in where]
        node = ray.get_runtime_context().get_node_id()
        record["placement"] = pl.placement_map(list(range(world)), [node] * world,
                                               {node: LOOPBACK}, [w["device"] for w in where])
        iso, record["isolation"] = _isolate(scenario, run_dir.name, pids, say)
        if iso is not None:
            job.on_teardown(iso.cleanup)
        job.launched({"pids": pids, "isolation": iso, "run_dir": run_dir, "say": say})
        cgroups = [None if iso is None else {
            "cpu_dir": str(iso.rank_cpu_dir(r)), "period_us": record["isolation"]["period_us"],
            "cores": record["isolation"]["cores_per_rank"]} for r in range(world)]
        topo, net, record["network"] = _network(injectors, world, say)
        if topo is not None:
            job.on_teardown(topo.destroy)
        futures = {a.run.remote(cgroups[rank], net): rank for rank, a in enumerate(actors)}
        t_run = time.time()
        record["error"] = wait_for_ranks(ray, futures, job.summaries, run_dir, scenario, say)
        record["outcome"] = "failed" if record["error"] else "ok"
        if record["error"]:
            for a in actors:
                ray.kill(a, no_restart=True)
        record["wall_s"] = {"ray_start": t_ray - t_start, "train": time.time() - t_run}
    return job.record


def _shutdown_ray(ray, node_note) -> None:
    """Disconnect from (and so stop) this run's private Ray, and forget its node."""
    if ray.is_initialized():
        ray.shutdown()
        forget_ray_node(node_note)


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
    # By default 90% of the machine is dealt out (workloads/cpu_share.py).
    cores = run.cores_per_rank or default_cores(os.cpu_count() or 1, len(pids))
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
