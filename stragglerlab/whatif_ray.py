"""The what-if's replays over a Ray cluster's cores (`stragglerlab whatif --ray-address`).

One process reads and validates the trace, builds the graph and the frame and
takes the statistics that span steps (each op type's ideal over every step and
DP rank, the comm excess, the traced step times). Everything after that is
replays (analysis.replays), and a replay of one step needs that step's values
alone: the steps are split into contiguous parts, one Ray actor per part holds
its part of the sim values [n_nodes, steps of the part, dp] and replays it, and
the step times come back in step order. whatif.json is bit for bit the one of
one process (analysis.replays says why; tests/e2e/test_whatif_ray.py checks it).

Reading and building the frame stay in the driver: the trace's checks and the
ideal (a mean over every step) are defined over the whole trace, and split
they would give other messages and other last bits. At 16,384 workers the
replays are over half of one process's CPU (benchmarks/README.md).

    with RayReplays(address="local", workers=2, say=print) as replays:
        run = run_whatif(df, meta, where, replays=replays)   # replays(graph, value) -> ...
        replays.costs()                                      # per actor: node, CPU, peak RSS

Ray is imported only here (the core install has none; the `train` extra brings it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stragglerlab.analysis.graph import DepGraph
from stragglerlab.analysis.replays import ChunkedReplays, Replays, step_parts
from stragglerlab.util.errors import InputError
from stragglerlab.util.interrupts import keep_sigterm_handler
from stragglerlab.workloads.placement import loopback_node

LOCAL = "local"
"""--ray-address value that starts a private Ray on this machine (loopback only)."""
LOOPBACK = "127.0.0.1"
OBJECT_STORE_FLOOR_BYTES = 100 * 1024 * 1024
"""Smallest object store of a local Ray (Ray's own minimum is 75 MiB)."""
OBJECT_STORE_PER_VALUE = 2
"""A local Ray's object store holds this many copies of the sim values: the parts of
one, and room for the masks and results beside them."""


@dataclass(kw_only=True)
class ActorCost:
    """What one replay actor used, read in the actor at the end."""

    node_ip: str
    """IP of the node the actor ran on."""
    pid: int
    """The actor's process id."""
    n_steps: int
    """Steps in its part."""
    cpu_s: float
    """User + system CPU seconds of its process, start-up included."""
    peak_rss_mib: float
    """Peak resident memory of its process, MiB (ru_maxrss)."""


class _Part:
    """One actor's part: the replays of a contiguous run of steps (made a Ray actor by
    `_actor_class`)."""

    def __init__(self, graph: DepGraph, value: np.ndarray) -> None:
        self.replays = Replays(graph, value)

    def run(self, method: str, *args: object) -> object:
        return getattr(self.replays, method)(*args)

    def cost(self) -> dict:
        import os
        import resource

        import ray

        use = resource.getrusage(resource.RUSAGE_SELF)
        return {"node_ip": ray.util.get_node_ip_address(), "pid": os.getpid(),
                "n_steps": int(self.replays.value.shape[1]),
                "cpu_s": use.ru_utime + use.ru_stime, "peak_rss_mib": use.ru_maxrss / 1024}


def import_ray():
    """The ray module, or one InputError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray-address needs Ray, which this install lacks: install the "
                         "`train` extra (pip install 'stragglerlab[train]') or leave "
                         "--ray-address out to analyse in this process") from None
    return ray


class RayReplays:
    """A replays factory for run_whatif (analysis.replays.ReplaysFactory) on Ray actors.

    Ray starts (local) or is attached to (HOST:PORT, `auto`) at the first call, when the
    trace has been read: a bad trace fails before any Ray. Leaving the `with` kills the
    actors and disconnects (a local Ray stops; a cluster keeps running).
    """

    def __init__(self, *, address: str, workers: int | None,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.address = address
        """HOST:PORT or `auto` of a running cluster, or LOCAL."""
        self.workers = workers
        """Actors (step parts) wanted; None: one per CPU of the cluster."""
        self.say = say
        """Progress lines."""
        self._ray = None
        self._actors: list = []

    def __enter__(self) -> RayReplays:
        self._ray = import_ray()
        return self

    def __exit__(self, *exc) -> None:
        if self._ray is not None and self._ray.is_initialized():
            self._kill_actors()
            self._ray.shutdown()

    def _kill_actors(self) -> None:
        for a in self._actors:
            with contextlib.suppress(Exception):  # a lost node's actor is gone already
                self._ray.kill(a)
        self._actors = []

    def _init(self, value_bytes: int) -> None:
        ray = self._ray
        env = {"env_vars": {"OMP_NUM_THREADS": "1",
                            "PYTHONWARNINGS": "ignore::FutureWarning"}}
        with keep_sigterm_handler():
            if self.address == LOCAL:
                store = max(OBJECT_STORE_FLOOR_BYTES, OBJECT_STORE_PER_VALUE * value_bytes)
                with loopback_node(ray):
                    ray.init(address="local", _node_ip_address=LOOPBACK,
                             include_dashboard=False, logging_level=logging.ERROR,
                             log_to_driver=False, object_store_memory=store, runtime_env=env)
            else:
                try:
                    ray.init(address=self.address, logging_level=logging.ERROR,
                             log_to_driver=False, runtime_env=env)
                except ConnectionError as e:
                    raise InputError(f"cannot attach to the Ray cluster at {self.address}: "
                                     f"{str(e).strip().splitlines()[0][:300]}",
                                     "--ray-address") from None

    def __call__(self, graph: DepGraph, value: np.ndarray) -> ChunkedReplays:
        """Start one actor per step part, each holding its part of `value`."""
        ray = self._ray
        if ray is None:
            raise RuntimeError("RayReplays is used inside its `with` block")
        if not ray.is_initialized():
            self._init(value.nbytes)
        self._kill_actors()  # a second trace's replays replace the first's
        # Free CPUs, not all: an actor asking for a CPU a training job holds waits for it.
        cpus = int(ray.available_resources().get("CPU", 0))
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        workers = self.workers or cpus
        if not 1 <= workers <= cpus:
            asked = f"{workers} workers" if self.workers else "the replays"
            raise InputError(f"{asked}: one free CPU per worker is needed, and the Ray cluster "
                             f"at {self.address} has {cpus} free; give fewer --ray-workers "
                             "or free the cluster's CPUs", "--ray-workers")
        parts = step_parts(value.shape[1], workers)
        actor = ray.remote(num_cpus=1)(_Part)
        graph_ref = ray.put(graph)
        self._actors = [actor.options(scheduling_strategy="SPREAD").remote(
            graph_ref, ray.put(np.ascontiguousarray(value[:, part]))) for part in parts]
        split = "/".join(str(p.stop - p.start) for p in parts)
        self.say(f"replays on {len(parts)} Ray workers ({nodes} node{'s' * (nodes != 1)}, "
                 f"{cpus} CPUs), {value.shape[1]} steps split {split}")

        def call(method: str, args: list[tuple]) -> list:
            put: dict[int, object] = {}  # an array shared by every part is put once
            for part in args:
                for a in part:
                    if isinstance(a, np.ndarray) and id(a) not in put:
                        put[id(a)] = ray.put(a)
            refs = [[put.get(id(a), a) for a in part] for part in args]
            try:
                return ray.get([a.run.remote(method, *r) for a, r in zip(self._actors, refs)])
            except ray.exceptions.RayActorError as e:
                raise InputError(f"a Ray replay worker was lost (its node died?): "
                                 f"{str(e).strip().splitlines()[0][:200]}; rerun, or leave "
                                 "--ray-address out to analyse in this process",
                                 "--ray-address") from None

        return ChunkedReplays(call, parts)

    def costs(self) -> list[ActorCost]:
        """Per actor, in step order: its node, CPU seconds and peak RSS so far."""
        if not self._actors:
            return []
        return [ActorCost(**c) for c in self._ray.get([a.cost.remote() for a in self._actors])]
