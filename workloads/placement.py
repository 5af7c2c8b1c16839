"""Pure decisions of a run on a Ray cluster: bundles, rank order, device, interface, clocks.

No Ray and no torch here, so every rule is unit-tested in milliseconds
(tests/unit/test_placement.py); `workloads.cluster` applies them to a live
cluster.

* Rank order is Megatron's: TP innermost (tp = 1 here), then DP, then PP, so
  global rank = stage * dp + dp_rank (the engine and the trace use the same).
  `assign_ranks` hands the placement group's bundles to ranks pipeline by
  pipeline, so one pipeline's P2P stays on one node where the node has room;
  the DP collectives are what crosses nodes, as in Megatron on a real cluster.
* `gloo_ifname` picks GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME from the route to
  rank 0's node IP (`ip -o route get`, `ip -o addr`); never loopback for an
  address other nodes must reach.
* `estimate_offset` is the NTP rule: the round trip with the smallest RTT
  bounds the offset best; half of it is the uncertainty.

    slots = assign_ranks(["n1", "n1", "n2", "n2"], dp=2, pp=2)   # rank -> bundle index
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from stragglerlab.scenarios.scenario_vocab import Backend, Placement
from stragglerlab.util.errors import InputError


def check_ray_address(address: str, where: str = "--ray-address") -> str:
    """`auto` or HOST:PORT (what `ray start` prints), else one InputError."""
    address = address.strip()
    host, _, port = address.rpartition(":")
    if address == "auto" or (host and port.isdigit() and 0 < int(port) < 65536
                             and "/" not in host):
        return address
    raise InputError(f"Ray address {address!r}: give HOST:PORT of the cluster's head (as "
                     "`ray start --head` prints it) or `auto`", where)


def check_ray_reachable(address: str, where: str = "--ray-address",
                        timeout_s: float = 5.0) -> None:
    """One TCP connect to HOST:PORT's GCS before Ray is asked: Ray itself retries an
    unreachable or unresolvable head for minutes before it gives up. `auto` is Ray's
    to find (it fails at once when no cluster runs on this machine)."""
    import socket

    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except socket.gaierror:
        why = f"the host name {host!r} does not resolve"
    except TimeoutError:
        why = f"no answer within {timeout_s:g} s"
    except OSError as e:
        why = e.strerror or type(e).__name__
    raise InputError(f"cannot reach the Ray cluster at {address} ({why}): start its head "
                     f"there with `ray start --head --port={port}` and open the port, or "
                     "leave the address out for a private local Ray", where)


def ray_strategy(strategy: Placement, private: bool) -> str:
    """The Ray placement-group strategy: a private local Ray has one node (STRICT_PACK)."""
    if private:
        return "STRICT_PACK"
    return "PACK" if strategy is Placement.PACK else "SPREAD"


def wants_gpu(backend: Backend, cluster_gpus: float, world: int) -> bool:
    """Whether each rank's bundle asks for a GPU: nccl, or auto with a GPU for every rank."""
    return backend is Backend.NCCL or (backend is Backend.AUTO and cluster_gpus >= world)


def bundles(world: int, cpus_per_rank: float, gpu: bool) -> list[dict]:
    """One bundle per rank: its CPU, and one GPU when the run is on CUDA."""
    one = {"CPU": cpus_per_rank, **({"GPU": 1} if gpu else {})}
    return [dict(one) for _ in range(world)]


def megatron_rank(dp_rank: int, stage: int, dp: int) -> int:
    """Global rank of (dp_rank, stage): TP innermost (tp = 1), then DP, then PP."""
    return stage * dp + dp_rank


def assign_ranks(bundle_nodes: list[str], dp: int, pp: int) -> list[int]:
    """Bundle index of every rank (list index = rank).

    Bundles are grouped by node (nodes in order of first appearance, bundle
    order kept within a node); pipelines are then laid onto these slots one
    after the other, stage by stage, so a pipeline crosses a node boundary
    only where a node's bundle count does not hold whole pipelines.
    """
    if len(bundle_nodes) != dp * pp:
        raise ValueError(f"{len(bundle_nodes)} bundles for {dp * pp} ranks")
    order: dict[str, list[int]] = {}
    for i, node in enumerate(bundle_nodes):
        order.setdefault(node, []).append(i)
    slots = [i for idxs in order.values() for i in idxs]
    by_rank = [0] * (dp * pp)
    pos = 0
    for d in range(dp):
        for s in range(pp):
            by_rank[megatron_rank(d, s, dp)] = slots[pos]
            pos += 1
    return by_rank


def placement_map(rank_bundle: list[int], bundle_nodes: list[str], node_ips: dict[str, str],
                  devices: list[str]) -> list[dict]:
    """run.json `placement`: [{rank, node_id, node_ip, device}] in rank order."""
    return [{"rank": r, "node_id": bundle_nodes[b], "node_ip": node_ips.get(bundle_nodes[b], ""),
             "device": devices[r]} for r, b in enumerate(rank_bundle)]


def ranks_on(placement: list[dict], node_ids: set[str]) -> list[int]:
    """Ranks placed on any of `node_ids` (e.g. a lost node's)."""
    return sorted(p["rank"] for p in placement if p["node_id"] in node_ids)


def rank_device(gpu_ids: list, visible: str | None) -> str:
    """The torch device of a rank Ray gave `gpu_ids` (CUDA_VISIBLE_DEVICES = `visible`).

    Ray narrows CUDA_VISIBLE_DEVICES to the assigned GPUs, so the device is the
    position of the first assigned id in that list (cuda:0 in the usual case),
    never cuda:<rank>. No GPU assigned: cpu.
    """
    if not gpu_ids:
        return "cpu"
    listed = [v.strip() for v in (visible or "").split(",") if v.strip()]
    first = str(gpu_ids[0])
    return f"cuda:{listed.index(first)}" if first in listed else "cuda:0"


_ROUTE_DEV = re.compile(r"\bdev\s+(\S+)")
_ADDR_LINE = re.compile(r"^\d+:\s+(\S+)\s+inet\s+([0-9.]+)/")


def gloo_ifname(ip: str, route_out: str, addr_out: str) -> str | None:
    """The interface to reach `ip` (rank 0's node IP) by, from `ip -o route get IP` and
    `ip -o -4 addr` output; None when neither names one.

    A route to one of this host's own addresses says `local ... dev lo`: other
    nodes cannot reach loopback, so the interface holding that address is used
    instead (on rank 0's node that is what gloo must bind and advertise).
    """
    first = route_out.strip().splitlines()[0] if route_out.strip() else ""
    dev = _ROUTE_DEV.search(first)
    if first.startswith("local") or (dev and dev.group(1) == "lo" and not ip.startswith("127.")):
        for line in addr_out.splitlines():
            m = _ADDR_LINE.match(line.strip())
            if m and m.group(2) == ip:
                return m.group(1)
    return dev.group(1) if dev else None


@dataclass(kw_only=True, frozen=True)
class ClockOffset:
    """One node's clock against the driver's, from round trips."""

    offset_s: float
    """Remote clock minus driver clock (seconds) at the best round trip."""
    uncertainty_s: float
    """Half the best round trip: the offset is within +- this."""
    samples: int
    """Round trips taken."""


def estimate_offset(samples: list[tuple[float, float, float]]) -> ClockOffset:
    """Offset from (driver send, remote clock, driver receive) round trips: the sample
    with the smallest round trip, remote minus the midpoint of send and receive."""
    if not samples:
        raise ValueError("no clock samples")
    t0, remote, t1 = min(samples, key=lambda s: s[2] - s[0])
    return ClockOffset(offset_s=remote - (t0 + t1) / 2, uncertainty_s=max(t1 - t0, 0.0) / 2,
                       samples=len(samples))


def relative_offset(node: ClockOffset, ref: ClockOffset) -> tuple[float, float]:
    """(offset, uncertainty) of a node's clock against the reference node's (rank 0's)."""
    return node.offset_s - ref.offset_s, node.uncertainty_s + ref.uncertainty_s


def applied_correction(offset_s: float, uncertainty_s: float, same_clock: bool) -> float:
    """Seconds to subtract from a node's timestamps.

    Nodes on one host (same boot id) share CLOCK_MONOTONIC exactly: nothing.
    An offset within its own uncertainty is not told apart from 0, and
    correcting by it would only add noise: nothing either.
    """
    if same_clock or abs(offset_s) <= uncertainty_s:
        return 0.0
    return offset_s


@contextlib.contextmanager
def loopback_node(ray):
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
