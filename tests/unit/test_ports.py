"""The rendezvous port (workloads/ports.py): free, and outside the ephemeral range."""

from __future__ import annotations

import random
import socket

from stragglerlab.workloads import ports


def test_the_port_is_free_and_below_the_ephemeral_range():
    lo, _ = ports.ephemeral_range()
    for _ in range(20):
        port = ports.rendezvous_port("127.0.0.1")
        assert ports.LOW <= port < lo
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))  # free: binding it works


def test_a_taken_port_is_not_drawn(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(ports, "LOW", taken)
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (taken + 2, 60999))
        # Only `taken` and `taken + 1` are drawn from: never the one a listener holds.
        got = {ports.rendezvous_port("127.0.0.1", random.Random(s)) for s in range(10)}
        assert taken not in got


def test_no_room_below_the_range_falls_back_to_the_kernel(monkeypatch, tmp_path):
    narrow = tmp_path / "range"
    narrow.write_text("1024\t65000\n")
    assert ports.ephemeral_range(narrow) == (1024, 65000)
    bad = tmp_path / "garbled"
    bad.write_text("x")
    assert ports.ephemeral_range(bad) == (32768, 60999)
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65000))
    assert 0 < ports.rendezvous_port("127.0.0.1") < 65536
