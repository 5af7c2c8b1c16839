"""Ray stays private and hosts stay clean (slow tier).

* During a `train` run, every TCP socket that the driver, Ray (GCS, raylet,
  agents, workers) or a rank listens on is bound to loopback (127.0.0.0/8 or
  ::1), read from /proc/net/tcp{,6} and the processes' fds.
* After a SIGKILLed driver, `stragglerlab clean` (not the next run) leaves no
  network namespace, cgroup, tc rule or marked process of ours.

    .venv/bin/python -m pytest -m slow tests/e2e/test_ray_private.py
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stragglerlab.host.cgroups import CpuIsolation
from tests.e2e.test_faults_ray import (
    cli,
    killed_mid_injection,
    our_cgroups,
    our_namespaces,
    processes_of,
)

pytestmark = pytest.mark.slow

LISTEN = "0A"


def _addr(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    # /proc/net/tcp6: four 32-bit words, each in host (little-endian) order
    return ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def listening_sockets() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket of this network namespace."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != LISTEN:
                continue
            host, port = f[1].split(":")
            found[int(f[9])] = (str(_addr(host)), int(port, 16))
    return found


def socket_inodes(pid: int) -> set[int]:
    """Socket inodes open in process pid."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def _is_loopback(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def node_processes(driver_pid: int) -> tuple[set[str], list[int]]:
    """(Ray node ids the driver noted, live processes of those nodes: the unmarked agents too)."""
    from stragglerlab.host.residue import NODES_DIR, _marks

    nodes = {json.loads(p.read_text())["node_id"] for p in NODES_DIR.glob(f"{driver_pid}-*.json")}
    return nodes, [p for p, (_mark, node) in _marks().items() if node in nodes]


def _wait_step(out: Path, rank: int, step: int, driver: subprocess.Popen, limit_s: float):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if driver.poll() is not None:
            pytest.fail(f"train exited early ({driver.returncode})")
        try:
            if json.loads((out / "status" / f"rank{rank}.json").read_text())["step"] >= step:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.3)
    pytest.fail(f"the run never reached step {step}")


def test_train_listens_on_loopback_only(tmp_path: Path):
    out = tmp_path / "run"
    driver = subprocess.Popen(cli("train", "--scenario", "clean-dp2-pp2", "--steps", "60",
                                  "--out", str(out)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_step(out, 3, 2, driver, 180)
        pids = [driver.pid, *processes_of(driver.pid)]
        assert len(pids) >= 5, pids  # driver, Ray's processes and 4 ranks
        table = listening_sockets()
        listening = {(pid, *table[i]) for pid in pids for i in socket_inodes(pid) if i in table}
        assert listening, "no listening socket found: the check would pass vacuously"
        public = sorted(x for x in listening if not _is_loopback(x[1]))
        cmd = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p, *_ in public
               if Path(f"/proc/{p}").exists()}
        assert public == [], f"listening outside loopback: {public} {cmd}"
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        subprocess.run(cli("clean"), capture_output=True, timeout=120)


@pytest.mark.skipif(os.geteuid() != 0 or not CpuIsolation.available()[0],
                    reason="needs root, cgroup v1 and network namespaces")
def test_clean_reaps_a_sigkilled_run(tmp_path: Path):
    driver_pid, before_ns, before_cg = killed_mid_injection(tmp_path)
    assert processes_of(driver_pid), "Ray and the ranks outlive a SIGKILLed driver"
    nodes, _ = node_processes(driver_pid)
    assert nodes, "the driver noted its Ray node"
    done = subprocess.run(cli("clean"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "killed" in done.stdout
    assert set(our_namespaces()) <= before_ns
    assert set(our_cgroups()) <= before_cg
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    assert "tbf" not in qdiscs
    assert processes_of(driver_pid) == []
    from stragglerlab.host.residue import _marks

    assert [p for p, (_m, node) in _marks().items() if node in nodes] == []
