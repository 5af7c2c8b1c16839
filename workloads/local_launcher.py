"""Launch one training run without Ray: one process per rank, from torch.multiprocessing.

The named fallback for a machine that has torch but no Ray (a GPU machine with only its
own CUDA torch, say): `stragglerlab train --launcher local`. It runs the same rank
trainers as the Ray launcher (`workloads.launcher`), writes the same run folder and
ground truth, and fails the same way (the first rank's error, or no step finished for
longer than the collective timeout, ends the run; every rank process is then killed),
in the launchers' one lifecycle (`workloads.run_lifecycle`).
What it leaves out: Ray's placement and per-rank CPU quotas (cgroups) and network
namespaces, so network faults take their in-process fallback.

Devices (`local_devices`): on CPU every rank computes on the host with gloo; with at
least one GPU per rank, each rank gets its own GPU and NCCL; with fewer GPUs than ranks,
ranks share the GPUs round-robin and communicate with gloo through host memory
(`workloads.host_staging`), since NCCL refuses two ranks on one device.

    record = launch_local(scenario, "results/clean-dp2-pp2/0", progress=print)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import queue
import time
from pathlib import Path

from stragglerlab.run.run_folder import STATUS_DIR
from stragglerlab.scenarios.scenario import Scenario, scenario_to_dict
from stragglerlab.scenarios.scenario_vocab import TORCH_WORKLOADS, Backend, Workload
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.ports import rendezvous_port
from stragglerlab.workloads.rank_actors import (
    MALLOC_ENV,
    POLL_S,
    Progress,
    StepWatch,
    laggard,
    rank_status,
)
from stragglerlab.workloads.run_lifecycle import Launch, recorded

LOOPBACK = "127.0.0.1"
RANK_ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::FutureWarning",
            "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", **MALLOC_ENV}
"""The rank processes' environment, as the Ray launcher gives its actors."""


def local_devices(world: int, gpus: int, backend: Backend) -> tuple[list[str | None], Backend]:
    """(each rank's device, the backend) of a local run on a machine with `gpus` GPUs.

    No GPU, or backend gloo asked: every rank on the CPU with gloo (None: the engine's rule).
    A GPU per rank: cuda:<rank>, NCCL. Fewer GPUs than ranks: round-robin over them,
    gloo through host memory; asking for NCCL then is an InputError."""
    if gpus <= 0 or backend is Backend.GLOO:
        if backend is Backend.NCCL:
            raise InputError("run.backend nccl needs a GPU per rank and this machine has "
                             "none: use backend auto or gloo", "--launcher local")
        return [None] * world, Backend.GLOO
    if gpus >= world and backend is not Backend.GLOO:
        return [f"cuda:{r}" for r in range(world)], Backend.NCCL
    if backend is Backend.NCCL:
        raise InputError(f"run.backend nccl needs a GPU per rank: {world} ranks, {gpus} "
                         "GPUs; use backend auto (gloo through host memory when ranks "
                         "share a GPU)", "--launcher local")
    return [f"cuda:{r % gpus}" for r in range(world)], Backend.GLOO


def check_shared_gpu(workload: Workload, devices: list[str | None], backend: Backend) -> None:
    """torch's wrappers on GPUs need NCCL, one GPU per rank: refuse them where ranks would
    share a GPU through the host (gloo on cuda devices). gloo on the CPU is fine."""
    if workload in TORCH_WORKLOADS and backend is Backend.GLOO and any(devices):
        gpus = len(set(filter(None, devices)))
        raise InputError(f"workload {workload.value} on {len(devices)} ranks sharing {gpus} "
                         "GPU(s): torch's wrappers need NCCL, one GPU per rank; use the "
                         "megatron workload, fewer ranks, or run: {backend: gloo} to run "
                         "on the CPU", "--launcher local")


def _rank_main(scenario: Scenario, rank: int, run_dir: str, init_method: str, specs: list,
               device: str | None, results) -> None:
    """One rank's process: train, then put (rank, summary, None) or (rank, None, error).
    Its output (torch's warnings, the profiler's lines) goes to status/rank<N>.log, not
    the terminal, as Ray keeps its actors' output from the driver."""
    log = Path(run_dir) / STATUS_DIR / f"rank{rank}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from stragglerlab.workloads.trainers import trainer_class

    try:
        trainer = trainer_class(scenario.workload)(scenario, rank, run_dir, init_method, specs,
                                                   device=device)
        results.put((rank, trainer.run(None, None), None))
    except BaseException as e:  # noqa: BLE001 - reported to the launcher, which decides
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        results.put((rank, None, f"{type(e).__name__}: {lines[-1] if lines else ''}"[:1000]))


@contextlib.contextmanager
def _env(extra: dict):
    """The rank environment for processes started inside (spawn copies os.environ)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def launch_local(scenario: Scenario, out: str | Path, progress: Progress | None = None,
                 keep_monitor: bool = False) -> dict:
    """Run the scenario in local processes; returns run.json's content (outcome 'ok' or
    'failed'), as `workloads.launcher.launch` does."""
    import torch
    import torch.multiprocessing as mp

    from stragglerlab.workloads.launcher import prepare_faults, prepare_run_dir

    say = progress or (lambda _msg: None)
    scenario, specs, injectors = prepare_faults(scenario)
    world = scenario.world_size
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    devices, backend = local_devices(world, gpus, scenario.run.backend)
    check_shared_gpu(scenario.workload, devices, backend)
    scenario = dataclasses.replace(scenario, run=dataclasses.replace(scenario.run,
                                                                     backend=backend))
    run_dir = Path(out).resolve()
    prepare_run_dir(run_dir, keep_monitor=keep_monitor)
    record: dict = {"scenario": scenario_to_dict(scenario), "name": scenario.name,
                    "seed": scenario.run.seed, "outcome": "failed", "error": None,
                    "host": platform.node(), "launcher": "local",
                    "versions": {"python": platform.python_version(), "torch": torch.__version__,
                                 "cuda": torch.version.cuda, "ray": None},
                    "isolation": {"enabled": False, "reason": "local launcher (no cgroups)"},
                    "network": {"namespaces": False, "reason": "local launcher (loopback)"}}
    t_start = time.time()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init_method = f"tcp://{LOOPBACK}:{rendezvous_port(LOOPBACK)}"
    procs: list = []
    job = Launch(scenario=scenario, run_dir=run_dir, record=record, injectors=injectors,
                    t_start=t_start)
    job.on_teardown(lambda: _stop(procs))
    with recorded(job):
        say(f"local launcher: {world} ranks, backend {backend.value}, devices "
            f"{sorted(set(d or 'cpu' for d in devices))}; rank output in "
            f"{run_dir / STATUS_DIR}/rank<N>.log")
        with _env(RANK_ENV):
            for rank in range(world):
                p = ctx.Process(target=_rank_main, name=f"stragglerlab-rank{rank}",
                                args=(scenario, rank, str(run_dir), init_method, specs,
                                      devices[rank], results), daemon=True)
                p.start()
                procs.append(p)
        record["placement"] = [{"rank": r, "node_id": "local", "node_ip": LOOPBACK,
                                "device": devices[r] or "cpu"} for r in range(world)]
        job.launched({"pids": [p.pid for p in procs], "isolation": None,
                         "run_dir": run_dir, "say": say})
        t_run = time.time()
        record["error"] = _wait(procs, results, job.summaries, run_dir, scenario, say)
        record["outcome"] = "failed" if record["error"] else "ok"
        record["wall_s"] = {"train": time.time() - t_run}
    return job.record


def _stop(procs: list) -> None:
    """Kill the rank processes still running and reap them all."""
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=10)


def _wait(procs: list, results, summaries: dict, run_dir: Path, scenario: Scenario,
          say: Progress) -> dict | None:
    """Collect every rank's summary; the first error, death or hang is the run's error."""
    world = scenario.world_size
    watch = StepWatch(scenario=scenario, say=say)
    while len(summaries) < world:
        try:
            rank, summary, error = results.get(timeout=POLL_S)
        except queue.Empty:
            rank = None
        if rank is not None:
            if error is not None:
                found = _blame(procs, summaries, rank, error, run_dir, world)
                say(f"rank {found['rank']} failed ({found['kind']}); stopping the run")
                return found
            summaries[rank] = summary
            continue
        dead = _dead(procs, summaries)
        if dead:
            say(f"rank {dead[0]} failed (worker-died); stopping the run")
            return _died(procs, dead[0])
        hang = watch.check(rank_status(run_dir, world))
        if hang is not None:
            return hang
    return None


def _dead(procs: list, summaries: dict) -> list[int]:
    """Ranks whose process exited with an error before reporting a summary."""
    return [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in summaries]


def _died(procs: list, rank: int) -> dict:
    return {"rank": rank, "kind": "worker-died",
            "message": f"rank process exited with code {procs[rank].exitcode}"}


def _blame(procs: list, summaries: dict, rank: int, error: str, run_dir: Path,
           world: int) -> dict:
    """The run's error when rank `rank` reported `error`. A peer's error often comes first
    when another rank died (its recv or collective fails): a death within a few seconds is
    the root cause; else a rank that started fewer steps than the others (the laggard)."""
    deadline = time.time() + 3.0
    while time.time() < deadline:
        dead = [r for r in _dead(procs, summaries) if r != rank]
        if dead:
            return dict(_died(procs, dead[0]), reported_by=rank)
        time.sleep(POLL_S)
    found = {"rank": rank, "kind": "worker-error", "message": error, "reported_by": rank}
    behind = laggard(rank_status(run_dir, world), world)
    if behind is not None:
        found.update(rank=behind, kind="hang")
    return found
