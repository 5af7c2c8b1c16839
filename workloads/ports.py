"""The rendezvous port of a run: free now, and outside the kernel's ephemeral range.

A port the kernel hands out for `bind(0)` comes from the ephemeral range
(`net.ipv4.ip_local_port_range`), the same range every outgoing connection on the host
takes its source port from. Between choosing the port and rank 0 binding it, a 16-rank
launch starts Ray workers that open many such connections, and one of them can take it
(seen: `OSError: [Errno 98] Address already in use` on rank 0, a §6 run lost). A port
below that range is never taken implicitly, only by a listener that asks for it, so it
is chosen there, at random (two launches on one host seldom draw the same), and checked
free by binding it.

    port = rendezvous_port("127.0.0.1")
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOW = 20000
"""Lowest port drawn: above the registered services most hosts run."""
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
TRIES = 64
"""Random draws before falling back to a port the kernel picks."""


def ephemeral_range(path: Path = PORT_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        lo, hi = (int(x) for x in path.read_text().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, port))
        except OSError:
            return False
        return True


def rendezvous_port(ip: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A TCP port free on `ip`, below the ephemeral range when there is room there."""
    rng = rng or random.SystemRandom()
    lo, _ = ephemeral_range()
    if lo - 1 > LOW:
        for _ in range(TRIES):
            port = rng.randrange(LOW, lo)
            if _free(ip, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]
