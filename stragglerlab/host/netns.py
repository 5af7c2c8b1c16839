"""Per-rank network namespaces so one training rank's network can be really throttled.

What: ``NetTopology`` builds, for one run and N ranks, a tiny private network::

    sl-<run>-hub   bridge ``sl-br`` with ports ``sl-h0`` .. ``sl-h<N-1>``
    sl-<run>-r<k>  ``sl-eth0`` = 10.213.<x>.<k+1>/24, the veth peer of ``sl-h<k>``

Why: on loopback every rank shares one interface, so ``tc`` cannot slow one rank
without slowing all. With a veth per rank, a token bucket (tbf) on that rank's veth
ends slows exactly that rank, in both directions, at the kernel level (gloo sees a
real slow link; no cooperation from the training code). Added latency would need
``netem``, which some kernels (this one) lack: ``netem_available()`` says so, and
latency is then injected in-process elsewhere.

How::

    ok, why = available()
    with NetTopology("run42", world_size=4) as topo:    # create() .. destroy()
        # in each rank's process (a Ray actor), before init_process_group:
        topo.enter(rank)   # moves ONLY the calling thread into sl-run42-r<rank>
        os.environ["GLOO_SOCKET_IFNAME"] = topo.rank_ifname(rank)
        # init_method=f"tcp://{topo.rank_address(0)}:29500"
        topo.throttle(2, rate_mbit=100)    # from anywhere (driver): rank 2 at 100 Mbit/s
        topo.unthrottle(2)

``setns(2)`` acts on a thread, not a process: sockets that thread opens afterwards,
and threads/processes it starts afterwards (gloo's I/O threads), live in the
namespace; other threads of the process stay where they were.

Everything we create (namespaces, and links, which only ever live inside our own
namespaces, never in the host's) starts with ``sl-``. A side file
``/tmp/stragglerlab-netns/<run>.json`` records the creator's pid and start time, so
``cleanup_stale()`` can remove the leftovers of a SIGKILLed run and nothing else.
Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2 (``ip``, ``tc``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import zlib
from pathlib import Path

PREFIX = "sl-"
NETNS_DIR = Path("/var/run/netns")
STATE_DIR = Path("/tmp/stragglerlab-netns")
CLONE_NEWNET = 0x40000000
RANK_IF = "sl-eth0"  # inside each rank ns; namespaced, so the same name in every rank
BRIDGE = "sl-br"
# No '-' in run ids, so "sl-<run>-r<k>" parses back unambiguously in cleanup_stale().
_RUN_RE = re.compile(r"^[A-Za-z0-9_]{1,24}$")
_PROBE_RE = re.compile(r"^sl-probe-(\d+)-\w+$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one iproute2 command (``ip ...`` or ``tc ...``); raise with its stderr."""
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


_libc = None


def _setns_fd(fd: int, what: str) -> None:
    global _libc
    if _libc is None:  # Python 3.11 has no os.setns
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), what)


def setns_net(path: str | os.PathLike) -> None:
    """Move the calling thread into the network namespace bound at ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns_fd(fd, str(path))
    finally:
        os.close(fd)


def _ns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def _del_ns(name: str) -> None:
    """Delete one of our namespaces; never raises, never touches a non-``sl-`` name."""
    if name.startswith(PREFIX) and _ns_exists(name):
        _ip("ip", "netns", "del", name, check=False)


def _start_ticks(pid: int) -> int | None:
    """Process start time (clock ticks since boot) from /proc, or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])  # field 22 of proc(5)


@contextlib.contextmanager
def _probe_ns(tag: str):
    """A throwaway namespace ``sl-probe-<pid>-<tag>``, deleted on exit."""
    name = f"{PREFIX}probe-{os.getpid()}-{tag}"
    _del_ns(name)
    _ip("ip", "netns", "add", name)
    try:
        yield name
    finally:
        _del_ns(name)


def available() -> tuple[bool, str]:
    """Can this process build topologies? Tries a throwaway namespace, veth and setns."""
    if not os.path.exists("/proc/self/ns/net"):
        return False, "no network namespaces (not Linux?)"
    if os.geteuid() != 0:
        return False, "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"'{tool}' not found (apt-get install -y iproute2)"
    try:
        with _probe_ns("a") as ns:
            _ip("ip", "-n", ns, "link", "add", "sl-a", "type", "veth", "peer", "name", "sl-b")
            _ip("ip", "-n", ns, "link", "add", BRIDGE, "type", "bridge")
            errs: list[BaseException] = []

            def try_enter():  # in a throwaway thread: it dies with its namespace
                try:
                    setns_net(NETNS_DIR / ns)
                except OSError as e:
                    errs.append(e)

            t = threading.Thread(target=try_enter)
            t.start()
            t.join()
            if errs:
                return False, f"setns failed: {errs[0]}"
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return False, f"cannot create a test namespace: {e}"
    return True, "ok"


def netem_available() -> bool:
    """True if the kernel has the netem qdisc (tried on lo of a throwaway namespace)."""
    try:
        with _probe_ns("n") as ns:
            args = ("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
            return _ip(*args, check=False).returncode == 0
    except (RuntimeError, OSError, subprocess.SubprocessError):
        return False


class NetTopology:
    """Hub namespace with a bridge plus one namespace and veth per rank (see module doc)."""

    available = staticmethod(available)
    netem_available = staticmethod(netem_available)

    def __init__(self, run_id: str, world_size: int):
        if not _RUN_RE.match(run_id):
            raise ValueError(f"run id must match {_RUN_RE.pattern}: {run_id!r}")
        if not 1 <= world_size <= 253:
            raise ValueError(f"world_size must be in 1..253 (one /24): {world_size}")
        self.run_id = run_id
        self.world_size = world_size
        # Rank namespaces are isolated, so equal subnets would not collide on the wire;
        # distinct ones per run still keep logs and captures unambiguous.
        self.subnet = zlib.crc32(run_id.encode()) % 256
        self.hub = f"{PREFIX}{run_id}-hub"
        self.state_file = STATE_DIR / f"{run_id}.json"

    # -- names ------------------------------------------------------------------------
    def rank_ns(self, rank: int) -> str:
        return f"{PREFIX}{self.run_id}-r{self._check(rank)}"

    def rank_address(self, rank: int) -> str:
        return f"10.213.{self.subnet}.{self._check(rank) + 1}"

    def rank_ifname(self, rank: int) -> str:
        """Interface inside the rank namespace: the value for GLOO_SOCKET_IFNAME."""
        self._check(rank)
        return RANK_IF

    def hub_ifname(self, rank: int) -> str:
        return f"{PREFIX}h{self._check(rank)}"

    def namespaces(self) -> list[str]:
        return [self.hub] + [self.rank_ns(k) for k in range(self.world_size)]

    def _check(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} out of range for world size {self.world_size}")
        return rank

    # -- lifecycle ----------------------------------------------------------------------
    def create(self) -> NetTopology:
        if _ns_exists(self.hub):
            raise RuntimeError(f"{self.hub} already exists (live run, or cleanup_stale())")
        # Side file first: a run killed half-way through create() is still found.
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        state = {"run_id": self.run_id, "pid": pid, "start_ticks": _start_ticks(pid),
                 "created": time.time(), "namespaces": self.namespaces()}
        self.state_file.write_text(json.dumps(state))
        try:
            hub = self.hub
            _ip("ip", "netns", "add", hub)
            _ip("ip", "-n", hub, "link", "set", "lo", "up")
            _ip("ip", "-n", hub, "link", "add", BRIDGE, "type", "bridge")
            _ip("ip", "-n", hub, "link", "set", BRIDGE, "up")
            for k in range(self.world_size):
                ns, hif = self.rank_ns(k), self.hub_ifname(k)
                _ip("ip", "netns", "add", ns)
                _ip("ip", "-n", ns, "link", "set", "lo", "up")
                # Created inside the hub ns with its peer put straight into the rank ns:
                # no link ever appears in the host's namespace.
                _ip("ip", "-n", hub, "link", "add", hif, "type", "veth",
                    "peer", "name", RANK_IF, "netns", ns)
                _ip("ip", "-n", hub, "link", "set", hif, "master", BRIDGE, "up")
                _ip("ip", "-n", ns, "addr", "add", f"{self.rank_address(k)}/24", "dev", RANK_IF)
                _ip("ip", "-n", ns, "link", "set", RANK_IF, "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        """Remove all our namespaces (their links go with them) and the side file.

        Idempotent and never raises. Deleting the hub ns destroys every veth pair, so
        the network is gone even if some thread still sits in a rank namespace.
        """
        for name in _run_namespaces(self.run_id) | set(self.namespaces()):
            _del_ns(name)
        with contextlib.suppress(OSError):
            self.state_file.unlink()

    def __enter__(self) -> NetTopology:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # -- use ----------------------------------------------------------------------------
    def enter(self, rank: int) -> None:
        """Move the CALLING THREAD (only) into rank's namespace; see module doc."""
        setns_net(NETNS_DIR / self.rank_ns(rank))

    @contextlib.contextmanager
    def entered(self, rank: int):
        """``enter(rank)`` for a block, then back to the thread's previous namespace."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.enter(rank)
            yield
        finally:
            try:
                _setns_fd(back, "previous netns")
            finally:
                os.close(back)

    def throttle(self, rank: int, rate_mbit: float, burst_kb: int = 64,
                 latency_ms: float = 50.0) -> None:
        """Token-bucket (tbf) limit of ``rate_mbit`` on both directions of ``rank``.

        Two qdiscs, since tc shapes egress only: on the hub-side veth ``sl-h<k>``
        (its egress = traffic *to* the rank) and on ``sl-eth0`` inside the rank ns
        (traffic *from* the rank). ``burst_kb`` >= 64 holds one full GSO segment
        of veth; ``latency_ms`` bounds the queue (beyond it packets drop).
        """
        tbf = ("root", "tbf", "rate", f"{rate_mbit * 1000:.0f}kbit",
               "burst", f"{burst_kb}kb", "latency", f"{latency_ms:g}ms")
        _ip("tc", "-n", self.hub, "qdisc", "replace", "dev", self.hub_ifname(rank), *tbf)
        _ip("tc", "-n", self.rank_ns(rank), "qdisc", "replace", "dev", RANK_IF, *tbf)

    def unthrottle(self, rank: int) -> None:
        """Drop both qdiscs of ``rank`` (no error if it was not throttled)."""
        _ip("tc", "-n", self.hub, "qdisc", "del", "dev", self.hub_ifname(rank), "root",
            check=False)
        _ip("tc", "-n", self.rank_ns(rank), "qdisc", "del", "dev", RANK_IF, "root",
            check=False)

    def measured_rate(self, src: int, dst: int, nbytes: int = 3_000_000,
                      timeout: float = 30.0) -> float:
        """Send ``nbytes`` over TCP from rank ``src`` to ``dst``; return Mbit/s.

        Two threads, each ``entered()`` into its rank's namespace (as Ray actors do).
        Timed at the receiver, from accept to EOF.
        """
        ready, result, errors = threading.Event(), {}, []

        def server():
            try:
                with self.entered(dst), socket.create_server((self.rank_address(dst), 0)) as s:
                    s.settimeout(timeout)
                    result["port"] = s.getsockname()[1]
                    ready.set()
                    conn, _ = s.accept()
                    t0, got = time.perf_counter(), 0
                    with conn:
                        conn.settimeout(timeout)
                        while chunk := conn.recv(1 << 16):
                            got += len(chunk)
                    result["secs"], result["got"] = time.perf_counter() - t0, got
            except BaseException as e:
                errors.append(e)
                ready.set()

        def client():
            try:
                ready.wait(timeout)
                with self.entered(src), socket.create_connection(
                        (self.rank_address(dst), result["port"]), timeout=timeout) as c:
                    buf, left = bytes(1 << 16), nbytes
                    while left > 0:
                        c.sendall(buf[:left])
                        left -= len(buf)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=server), threading.Thread(target=client)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 5)
        if errors:
            raise RuntimeError(f"throughput probe {src}->{dst} failed: {errors[0]!r}")
        if result.get("got") != nbytes:
            raise RuntimeError(f"throughput probe got {result.get('got')} of {nbytes} bytes")
        return nbytes * 8 / result["secs"] / 1e6


def _run_namespaces(run_id: str) -> set[str]:
    """Existing namespaces named exactly like ours for ``run_id``."""
    pat = re.compile(rf"^{re.escape(PREFIX + run_id)}-(hub|r\d+)$")
    try:
        return {p.name for p in NETNS_DIR.iterdir() if pat.match(p.name)}
    except OSError:
        return set()


def cleanup_stale() -> list[str]:
    """Remove topologies whose creator process is gone; return their run ids.

    Only runs with a side file are considered, and only ``sl-<run>-hub|r<k>`` names
    are deleted; also drops ``sl-probe-<pid>`` namespaces of dead probes.
    """
    cleaned = []
    for f in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            st = json.loads(f.read_text())
            run_id, pid, ticks = st["run_id"], int(st["pid"]), st.get("start_ticks")
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: we cannot tell whose it is, so leave it
        alive = _start_ticks(pid)
        if alive is not None and (ticks is None or alive == ticks):
            continue  # creator still running (same pid and same start time)
        if _RUN_RE.match(run_id):
            NetTopology(run_id, 1).destroy()  # removes every sl-<run>-* and the file
        cleaned.append(run_id)
        with contextlib.suppress(OSError):
            f.unlink()
    with contextlib.suppress(OSError):
        for p in NETNS_DIR.iterdir():
            m = _PROBE_RE.match(p.name)
            if m and _start_ticks(int(m.group(1))) is None:
                _del_ns(p.name)
    return cleaned
