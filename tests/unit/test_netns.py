"""stragglerlab.injectors.netns: per-rank namespaces, tbf throttling, cleanup, gloo over veths.

Needs root and iproute2; skipped otherwise. Traffic is bounded (a few MB per probe)
and stays inside namespaces the tests create.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import socket
import subprocess
import threading
import time
import uuid

import pytest

from stragglerlab.host import netns

OK, WHY = netns.available()
pytestmark = pytest.mark.skipif(not OK, reason=f"netns unavailable: {WHY}")


def _run_id() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def _netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture
def topo():
    t = netns.NetTopology(_run_id(), 2).create()
    yield t
    t.destroy()


def test_enter_moves_only_the_calling_thread(topo):
    seen = {}

    def body():
        topo.enter(1)
        seen["if"] = socket.if_nametoindex(topo.rank_ifname(1)) > 0

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen["if"]
    with pytest.raises(OSError):  # the main thread is still in the host namespace
        socket.if_nametoindex(topo.rank_ifname(1))


def test_throttle_both_directions_and_restore(topo):
    free = topo.measured_rate(0, 1)
    assert free > 500, f"unthrottled veth too slow: {free:.0f} Mbit/s"
    topo.throttle(0, rate_mbit=50)
    out, back = topo.measured_rate(0, 1), topo.measured_rate(1, 0)
    assert 45 <= out <= 55, f"rank 0 egress {out:.1f} Mbit/s, want 50 +-10%"
    assert 45 <= back <= 55, f"rank 0 ingress {back:.1f} Mbit/s, want 50 +-10%"
    topo.unthrottle(0)
    topo.unthrottle(0)  # idempotent
    assert topo.measured_rate(0, 1) > 500


def test_destroy_leaves_nothing(topo):
    prefix = f"sl-{topo.run_id}-"
    assert _netns_list().count(prefix) == 3
    assert topo.state_file.exists()
    topo.destroy()
    topo.destroy()  # idempotent
    assert prefix not in _netns_list()
    assert not topo.state_file.exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "sl-" not in links  # links only ever lived inside our namespaces


def test_cleanup_stale_removes_dead_creators_run(topo):
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = json.loads(topo.state_file.read_text())
    state["pid"] = dead.pid
    topo.state_file.write_text(json.dumps(state))
    live = netns.NetTopology(_run_id(), 1).create()  # ours, alive: must survive
    try:
        assert topo.run_id in netns.cleanup_stale()
        assert f"sl-{topo.run_id}-" not in _netns_list()
        assert not topo.state_file.exists()
        assert f"sl-{live.run_id}-hub" in _netns_list()
    finally:
        live.destroy()


def test_netem_probe_is_a_clean_bool():
    assert isinstance(netns.netem_available(), bool)
    assert f"sl-probe-{os.getpid()}-" not in _netns_list()


def test_bad_names_rejected():
    with pytest.raises(ValueError):
        netns.NetTopology("a-b", 2)
    with pytest.raises(IndexError):
        netns.NetTopology("ab", 2).rank_address(2)


NBYTES = 4_000_000  # 1e6 float32
# Repeats, judged by their minimum, so one scheduler hiccup on a busy machine
# cannot fail the test.
PHASES = ["warm"] + ["free"] * 2 + ["throttled"] * 2


def _gloo_worker(topo, rank, sync, results):
    topo.enter(rank)  # main thread, before torch creates any gloo socket or thread
    os.environ["GLOO_SOCKET_IFNAME"] = topo.rank_ifname(rank)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{topo.rank_address(0)}:29500",
                            rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    buf = torch.ones(NBYTES // 4) if rank == 0 else torch.empty(NBYTES // 4)
    for phase in PHASES:
        sync.wait()  # phase starts: the parent throttled (or not) while we were idle
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(buf, dst=1)
        else:
            buf.zero_()
            dist.recv(buf, src=0)
            results.put((phase, time.perf_counter() - t0, float(buf.sum())))
        sync.wait()  # phase over: never (un)throttle under a transfer in flight
    dist.destroy_process_group()


@pytest.mark.slow
def test_gloo_send_recv_over_throttled_rank(topo):
    ctx = mp.get_context("spawn")
    sync, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_gloo_worker, args=(topo, r, sync, results)) for r in (0, 1)]
    for p in procs:
        p.start()
    try:
        for i, phase in enumerate(PHASES):
            if phase == "throttled" and PHASES[i - 1] != phase:
                topo.throttle(1, rate_mbit=40)  # rank 1's ingress: the hub-side veth
            sync.wait(timeout=60)  # start
            sync.wait(timeout=60)  # end
        got = [results.get(timeout=60) for _ in PHASES]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert all(total == NBYTES // 4 for _, _, total in got)
    free = min(secs for phase, secs, _ in got if phase == "free")
    slow = min(secs for phase, secs, _ in got if phase == "throttled")
    print(f"gloo 4 MB: free {free:.3f} s, 40 Mbit/s {slow:.3f} s; all {got}")
    want = NBYTES * 8 / 40e6  # 0.8 s
    assert 0.8 * want <= slow <= 1.2 * want
    assert free < want / 4
    assert all(p.exitcode == 0 for p in procs)
