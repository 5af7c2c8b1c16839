"""Run one training job on an existing Ray cluster (`stragglerlab train --ray-address ADDR`).

What differs from the private local run of `workloads.launcher` (the rank
actors, the wait for them and their summaries are the same: workloads.rank_actors;
so is the error-recording lifecycle: workloads.run_lifecycle):

* Attach: `ray.init(address=ADDR)`; at the end only this driver disconnects
  (`ray.shutdown()`), after killing its own actors and removing its own
  placement group: the cluster is never stopped or reconfigured.
* Placement: one bundle per rank (1 CPU, + 1 GPU when the run is on CUDA),
  strategy `run.placement` (pack | spread); ranks go onto bundles pipeline by
  pipeline (workloads.placement.assign_ranks); run.json `placement` lists
  {rank, node_id, node_ip, device}; each rank uses the GPU Ray gave it.
* Rendezvous: rank 0's store binds rank 0's node IP (not loopback) on a port
  free there; every rank's GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME is the
  interface its node routes to that IP by. Timeouts as in a private run.
* Hosts: one `NodeHelper` per node (NodeAffinitySchedulingStrategy) does that
  node's CPU isolation and undoes it there, on success, failure and Ctrl-C.
  Per-rank network namespaces exist only in a private run: network faults on
  a cluster use the injectors' in-process fallback (run.json `network` says so).
* One clock: each node's clock offset to rank 0's node is measured at start
  and at end (round trips to its helper); timestamps are corrected by it
  unless the nodes share one kernel clock or the offset is within its own
  uncertainty (run.json `clock`).
* Lost node: when ranks die, helpers that no longer answer (or nodes Ray
  reports dead) are lost nodes; run.json `lost_nodes` names their ranks and
  the error carries `lost_ranks`; every surviving node's setup is undone.
* Live files (workloads.cluster_stream): RUN/nodes.json names each node's ranks,
  clock correction (start measurement) and, as soon as the driver finds it,
  that it is lost; the ranks of a node without the driver's filesystem stream
  their trace parts, GC logs and status files through its helper into the run
  folder here while the run goes on (run.json `stream`), so a monitor beside
  the driver sees every rank live.

    record = run_on_cluster(scenario, run_dir, "10.0.0.1:6379", specs, injectors, record, say, t0)
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from pathlib import Path

from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.util.atomic import atomic_write
from stragglerlab.util.interrupts import keep_sigterm_handler
from stragglerlab.workloads import placement as pl
from stragglerlab.workloads.cluster_stream import (
    NAMESPACE,
    NodeStreams,
    helper_name,
    nodes_doc,
    write_nodes,
)
from stragglerlab.workloads.cpu_share import default_cores
from stragglerlab.workloads.node_helper import NodeHelper
from stragglerlab.workloads.rank_actors import (
    MALLOC_ENV,
    rank_actor_class,
    rank_status,
    wait_for_ranks,
)
from stragglerlab.workloads.run_lifecycle import Launch, recorded

CLOCK_ROUND_TRIPS = 7
HELPER_TIMEOUT_S = 30.0
# A lost node's helper never answers: how long the driver waits before calling it lost.
PING_TIMEOUT_S = 5.0
STATUS_EVERY_S = 1.0


def _attach(ray, address: str) -> None:
    """Connect this driver to the cluster; a refused connection says what to check.

    Token authentication is Ray's own business: RAY_AUTH_MODE=token in the
    driver's environment sends the token (~/.ray/auth_token), as Ray documents.
    It is not switched on here: a token sent to a cluster without token auth
    breaks that cluster's workers for the job.
    """
    try:
        with keep_sigterm_handler():
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False,
                     runtime_env={"env_vars": {"OMP_NUM_THREADS": "1",
                                               "PYTHONWARNINGS": "ignore::FutureWarning",
                                               **MALLOC_ENV}})
    except ConnectionError as e:
        hint = "" if os.environ.get("RAY_AUTH_MODE") else (
            " (if the cluster uses token authentication, as `ray start` does when "
            "~/.ray/auth_token exists: set RAY_AUTH_MODE=token)")
        raise ConnectionError(f"cannot attach to the Ray cluster at {address}: "
                              f"{_first(e)}{hint}") from None


def _first(e: Exception) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(e).__name__


def _measure_clocks(ray, helpers: dict) -> dict[str, pl.ClockOffset]:
    """Each node's clock offset to the driver's, from a few round trips to its helper."""
    out = {}
    for nid, h in helpers.items():
        samples = []
        for _ in range(CLOCK_ROUND_TRIPS):
            t0 = time.monotonic()
            remote = ray.get(h.clock.remote(), timeout=HELPER_TIMEOUT_S)
            samples.append((t0, remote, time.monotonic()))
        out[nid] = pl.estimate_offset(samples)
    return out


def _clock_record(start: dict, end: dict, ref: str, same_clock: dict[str, bool],
                  node_of: list[str]) -> dict:
    """run.json `clock`: per node offset/uncertainty to rank 0's node, the correction
    applied per rank (from the start and end measurements, averaged)."""
    nodes, per_node = {}, {}
    for nid in start:
        off0, unc0 = pl.relative_offset(start[nid], start[ref])
        row = {"offset_s_start": off0, "uncertainty_s_start": unc0, "same_clock": same_clock[nid]}
        offs, uncs = [off0], [unc0]
        if nid in end and ref in end:
            off1, unc1 = pl.relative_offset(end[nid], end[ref])
            row.update(offset_s_end=off1, uncertainty_s_end=unc1)
            offs.append(off1)
            uncs.append(unc1)
        off, unc = sum(offs) / len(offs), max(uncs)
        per_node[nid] = pl.applied_correction(off, unc, same_clock[nid])
        nodes[nid] = dict(row, applied_s=per_node[nid])
    return {"reference_node": ref, "clock": "time.monotonic", "nodes": nodes,
            "rank_correction_s": {str(r): per_node[n] for r, n in enumerate(node_of)}}


def _lost_nodes(ray, helpers: dict) -> set[str]:
    """Nodes whose helper no longer answers or that Ray reports dead."""
    dead = {n["NodeID"] for n in ray.nodes() if not n.get("Alive", True)}
    pings = {nid: h.clock.remote() for nid, h in helpers.items() if nid not in dead}
    for nid, ref in pings.items():
        try:
            ray.get(ref, timeout=PING_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - actor died, node gone, or no answer in time
            dead.add(nid)
    return dead & set(helpers)


def _cores(scenario: Scenario, node_of: list[str], infos: dict) -> dict[str, float]:
    """CPU share per rank on each node: run.cores_per_rank, else 90% of the host's CPUs
    over the ranks on that host (nodes on one kernel share its CPUs)."""
    if scenario.run.cores_per_rank:
        return {n: scenario.run.cores_per_rank for n in infos}
    per_host: dict[str, int] = {}
    for n in node_of:
        per_host[infos[n]["boot_id"]] = per_host.get(infos[n]["boot_id"], 0) + 1
    return {n: default_cores(i["cpus"], per_host[i["boot_id"]]) for n, i in infos.items()}


def _status_reader(ray, helpers: dict, remote: dict[str, list[int]], run_dir: Path, world: int):
    """Progress of every rank: status files here, plus helpers' copies on other filesystems
    (asked at most once a second)."""
    cache: dict = {"t": 0.0, "remote": {}}

    def read() -> dict:
        status = rank_status(run_dir, world)
        if remote and time.monotonic() - cache["t"] > STATUS_EVERY_S:
            cache["t"] = time.monotonic()
            for nid, ranks in remote.items():
                try:
                    cache["remote"].update(ray.get(helpers[nid].status.remote(str(run_dir), ranks),
                                                   timeout=PING_TIMEOUT_S))
                except Exception:  # noqa: BLE001, S112 - a lost node reports nothing
                    continue
        return {**status, **cache["remote"]}

    return read


def run_on_cluster(scenario: Scenario, run_dir: Path, address: str, specs: list,
                   injectors: list, record: dict, say, t_start: float) -> dict:
    """Run the job on the cluster at `address`; returns run.json's content."""
    import ray
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    world, p = scenario.world_size, scenario.parallel
    record["ray"] = {"address": address, "attached": True,
                     "strategy": scenario.run.placement.value}
    helpers: dict = {}
    actors: list = []
    pg = None
    clocks_start: dict = {}
    node_of: list[str] = []
    infos: dict = {}
    streams: list[NodeStreams] = []
    token = secrets.token_hex(8)
    (run_dir / ".driver-token").write_text(token)
    job = Launch(scenario=scenario, run_dir=run_dir, record=record, injectors=injectors,
                    t_start=t_start)
    job.on_teardown(lambda: (run_dir / ".driver-token").unlink(missing_ok=True))
    # Late-bound: the teardown sees the helpers, placement group and clocks set up by then.
    job.on_teardown(lambda: _teardown(ray, actors, helpers, pg, record, run_dir, node_of,
                                         infos, clocks_start, say, streams))
    with recorded(job):
        record["ray"]["token_auth"] = os.environ.get("RAY_AUTH_MODE") == "token"
        _attach(ray, address)
        t_ray = time.time()
        gpu = pl.wants_gpu(scenario.run.backend, ray.cluster_resources().get("GPU", 0), world)
        strategy = pl.ray_strategy(scenario.run.placement, private=False)
        say(f"attached to Ray at {address}; {world} bundles ({strategy}"
            f"{', 1 GPU each' if gpu else ''})")
        pg = ray.util.placement_group(pl.bundles(world, 1, gpu), strategy=strategy)
        try:
            ray.get(pg.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"the cluster has no room for {world} bundles of 1 CPU"
                               f"{' + 1 GPU' if gpu else ''} within 120 s") from None
        table = ray.util.placement_group_table(pg)["bundles_to_node_id"]
        bundle_nodes = [table[i] for i in range(world)]
        node_ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        rank_bundle = pl.assign_ranks(bundle_nodes, p.dp, p.pp)
        node_of = [bundle_nodes[b] for b in rank_bundle]
        helper_cls = ray.remote(NodeHelper)
        # Named, so that `monitor --ray-address ADDR --run RUN` finds them (cluster_stream).
        helpers = {nid: helper_cls.options(
            num_cpus=0, name=helper_name(str(run_dir), nid), namespace=NAMESPACE,
            scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)).remote()
            for nid in dict.fromkeys(node_of)}
        infos = dict(zip(helpers, ray.get([h.info.remote(str(run_dir), token)
                                           for h in helpers.values()], timeout=120)))
        clocks_start = _measure_clocks(ray, helpers)
        ip0 = node_ips[node_of[0]]
        port = ray.get(helpers[node_of[0]].free_port.remote(ip0), timeout=HELPER_TIMEOUT_S)
        ifnames = dict(zip(helpers, ray.get([h.ifname.remote(ip0) for h in helpers.values()],
                                            timeout=HELPER_TIMEOUT_S)))
        init_method = f"tcp://{ip0}:{port}"
        actor_cls = rank_actor_class()
        for rank in range(world):
            ifname = ifnames[node_of[rank]]
            env = {"GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": ifname} if ifname else {}
            actors.append(actor_cls.options(
                num_cpus=1, num_gpus=1 if gpu else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=rank_bundle[rank])).remote(
                scenario, rank, str(run_dir), init_method, specs, env))
        where = ray.get([a.where.remote() for a in actors], timeout=300)
        record["placement"] = pl.placement_map(rank_bundle, bundle_nodes, node_ips,
                                               [w["device"] for w in where])
        record["rendezvous"] = {"address": init_method, "ifname": {
            n: ifnames[n] for n in helpers}}
        nodes = len(helpers)
        say(f"{world} ranks on {nodes} node{'s' * (nodes > 1)}; rendezvous {init_method}")
        record["isolation"] = _setup_hosts(ray, scenario, run_dir, helpers, node_of, infos,
                                           [w["pid"] for w in where], say)
        cgroups = record["isolation"].pop("cgroups")
        net_faults = any(inj.needs_netns for inj in injectors)
        record["network"] = {"namespaces": False, "reason": (
            "cluster run: per-rank network namespaces exist only in a private run; network "
            "faults use the in-process fallback") if net_faults else "no network fault"}
        job.launched({"pids": [w["pid"] for w in where], "isolation": None,
                         "run_dir": run_dir, "say": say})
        doc = nodes_doc(node_of, infos, clocks_start, node_ips)
        write_nodes(run_dir, doc)
        ray.get([h.set_doc.remote(doc) for h in helpers.values()], timeout=HELPER_TIMEOUT_S)
        streams.append(NodeStreams(ray, helpers, run_dir, doc, say))
        streams[0].start()
        if any(n["streamed"] for n in doc["nodes"].values()):
            say("streaming the trace parts of node(s) without this run folder: " + ", ".join(
                f"{n['hostname']} (ranks {n['ranks']})" for n in doc["nodes"].values()
                if n["streamed"]))
        futures = {a.run.remote(cgroups.get(rank), None): rank for rank, a in enumerate(actors)}
        remote = {}
        for rank, nid in enumerate(node_of):
            if not infos[nid]["shares_run_dir"]:
                remote.setdefault(nid, []).append(rank)
        t_run = time.time()
        record["error"] = wait_for_ranks(ray, futures, job.summaries, run_dir, scenario,
                                         say, _status_reader(ray, helpers, remote, run_dir,
                                                             world))
        record["outcome"] = "failed" if record["error"] else "ok"
        if record["error"]:
            _name_lost(ray, helpers, record, say)
        record["wall_s"] = {"ray_start": t_ray - t_start, "train": time.time() - t_run}
    return job.record


def _setup_hosts(ray, scenario: Scenario, run_dir: Path, helpers: dict, node_of: list[str],
                 infos: dict, pids: list[int], say) -> dict:
    """Each node's helper isolates that node's ranks; returns run.json `isolation` (with
    `cgroups`: rank -> cgroup dict, popped by the caller)."""
    if not scenario.run.cpu_isolation:
        return {"enabled": False, "reason": "disabled by run.cpu_isolation", "cgroups": {}}
    from stragglerlab.host.cgroups import quota_for

    cores = _cores(scenario, node_of, infos)
    period = {n: quota_for(c, scenario.run.cpu_period_us)[0] for n, c in cores.items()}
    run_id = f"{run_dir.name}-{os.getpid()}-{int(time.time())}"
    refs = {nid: h.setup.remote(f"{run_id}-n{i}", {r: pids[r] for r, n in enumerate(node_of)
                                                   if n == nid}, cores[nid], period[nid])
            for i, (nid, h) in enumerate(helpers.items())}
    per_node = {nid: ray.get(ref, timeout=HELPER_TIMEOUT_S) for nid, ref in refs.items()}
    cgroups = {int(r): c for res in per_node.values() for r, c in res["cgroups"].items()}
    enabled = all(res["enabled"] for res in per_node.values())
    if enabled:
        say("each node's ranks isolated by its helper: " + ", ".join(
            f"{cores[n]:.2f} cores/rank" for n in helpers))
    else:
        say("CPU isolation off on some node: " + "; ".join(
            res["reason"] for res in per_node.values() if not res["enabled"]))
    # Ranks on a node that could not isolate run unisolated (their rank record says so).
    return {"enabled": enabled, "cgroup_run_id": run_id, "cgroups": cgroups,
            "nodes": {nid: {"enabled": res["enabled"], "reason": res["reason"],
                            "cores_per_rank": cores[nid], "period_us": period[nid]}
                      for nid, res in per_node.items()},
            **({"cores_per_rank": min(cores.values()),
                "period_us": max(period.values())} if enabled else
               {"reason": "; ".join(r["reason"] for r in per_node.values() if r["reason"])})}


def _name_lost(ray, helpers: dict, record: dict, say) -> None:
    """After a failure: which nodes are gone and which ranks were on them."""
    lost = _lost_nodes(ray, helpers)
    if not lost:
        return
    ranks = pl.ranks_on(record.get("placement", []), lost)
    record["lost_nodes"] = [{"node_id": nid, "ranks": pl.ranks_on(record["placement"], {nid})}
                            for nid in sorted(lost)]
    err = record["error"]
    # The root cause is the node, whichever rank's error arrived first (a peer's broken
    # connection often beats Ray's report of the dead actor).
    err.update(kind="node-lost", lost_ranks=ranks, first_report=err.get("kind"),
               message=f"lost node(s) {', '.join(sorted(lost))} with ranks {ranks}; "
                       f"first report: {err.get('message', '')}"[:1000])
    if err.get("rank") not in ranks and ranks:
        err["rank"] = ranks[0]
    say(f"lost {len(lost)} node(s) holding ranks {ranks}")


def _teardown(ray, actors, helpers, pg, record, run_dir, node_of, infos, clocks_start,
              say, streams: list) -> None:
    """Kill our actors, stop the stream (a last pull), measure the end clocks, fetch files,
    undo every reachable node, remove our placement group, disconnect. Never stops the
    cluster."""
    if not ray.is_initialized():
        return
    for a in actors:
        ray.kill(a, no_restart=True)
    for s in streams:
        try:
            record["stream"] = s.stop()
        except Exception as e:  # noqa: BLE001 - the end fetch below still brings the files
            record["stream"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    lost = {n["node_id"] for n in record.get("lost_nodes", [])}
    alive = {nid: h for nid, h in helpers.items() if nid not in lost}
    try:
        if clocks_start:
            clocks_end = {}
            try:
                clocks_end = _measure_clocks(ray, alive)
            except Exception:  # noqa: BLE001 - the start measurement alone then
                say("clock offsets at the end could not be measured; start offsets used")
            same = {n: infos[n]["boot_id"] == infos[node_of[0]]["boot_id"] != ""
                    for n in clocks_start}
            record["clock"] = _clock_record(clocks_start, clocks_end, node_of[0], same, node_of)
        for nid, h in alive.items():
            if not infos.get(nid, {}).get("shares_run_dir", True):
                ranks = [r for r, n in enumerate(node_of) if n == nid]
                for rel, data in ray.get(h.fetch.remote(str(run_dir), ranks),
                                         timeout=HELPER_TIMEOUT_S).items():
                    # Replaced whole: a monitor tailing the streamed copy never sees it
                    # shrink (the fetched file holds the streamed bytes, then any more).
                    atomic_write_bytes(run_dir / rel, data)
    finally:
        undone = {}
        refs = {nid: h.undo.remote() for nid, h in alive.items()}
        for nid, ref in refs.items():
            try:
                undone[nid] = ray.get(ref, timeout=HELPER_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - recorded; the next run's helper reaps it
                undone[nid] = {"error": str(e)[:300]}
        record["hosts_undone"] = undone
        for h in helpers.values():
            ray.kill(h, no_restart=True)
        if pg is not None:
            try:
                ray.util.remove_placement_group(pg)
            except Exception:  # noqa: BLE001, S110 - its node may be gone; Ray frees it
                pass
        ray.shutdown()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`data` at `path`, replaced by a rename."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)


ATTACH_WAIT_S = 60.0
"""How long `monitor --ray-address` waits for the run's helpers to appear (a run starting)."""


def attach_stream(address: str, run_dir: Path, driver_run: str, say,
                  wait_s: float = ATTACH_WAIT_S) -> NodeStreams:
    """A monitor attaching to a running cluster run: the run's named helpers found (its
    driver's run folder path `driver_run`), its nodes.json written into `run_dir` here and
    every node's ranks streamed into it (started; `stop()` it, then `ray.shutdown()`).
    ConnectionError / LookupError when the cluster or the run is not there."""
    import ray

    _attach(ray, address)
    prefix = helper_name(driver_run, "")
    deadline = time.monotonic() + wait_s
    while True:
        names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                       if a.get("namespace") == NAMESPACE and a["name"].startswith(prefix))
        helpers = {n[len(prefix):]: ray.get_actor(n, namespace=NAMESPACE) for n in names}
        docs = [d for d in ray.get([h.get_doc.remote() for h in helpers.values()],
                                   timeout=HELPER_TIMEOUT_S) if d] if helpers else []
        if docs:
            break
        if time.monotonic() > deadline:
            ray.shutdown()
            raise LookupError(f"no run whose run folder is {driver_run} on the Ray cluster at "
                              f"{address} (waited {wait_s:.0f} s): name the folder as the "
                              "driver's `train --out` resolved it (run.json `ray`, or the "
                              "train's first lines)")
        time.sleep(1.0)
    doc = docs[0]
    write_nodes(run_dir, doc)
    say(f"attached to the run {driver_run} on {address}: {len(doc['nodes'])} node(s), "
        f"streaming every rank's trace part into {run_dir}")
    streams = NodeStreams(ray, {n: helpers[n] for n in doc["nodes"] if n in helpers}, run_dir,
                          doc, say, remote_run=driver_run, attached=True)
    streams.gone |= set(doc["nodes"]) - set(helpers)
    streams.start()
    return streams
