"""SIGTERM takes the Ctrl-C path: `finally` blocks (fault undo, host cleanup) run, exit 143."""

from __future__ import annotations

import os
import signal
import time
import types

import pytest

from stragglerlab import cli


@pytest.fixture
def fake_verb(monkeypatch):
    """A `train` verb whose run() is the given function (the parser is left as it is)."""
    def install(run):
        module = types.SimpleNamespace(add_parser=cli._verb("clean").add_parser, run=run)
        monkeypatch.setattr(cli, "_verb", lambda name: module)
    previous = signal.getsignal(signal.SIGTERM)
    yield install
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_runs_cleanup_and_exits_143(fake_verb, capsys):
    undone = []

    def run(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # interrupted by the handler well before this ends
            return 0
        finally:
            undone.append("faults undone")

    fake_verb(run)
    t0 = time.monotonic()
    assert cli.main(["clean"]) == 143
    assert time.monotonic() - t0 < 10
    assert undone == ["faults undone"]
    assert "terminated (SIGTERM)" in capsys.readouterr().err


def test_ctrl_c_still_exits_130(fake_verb, capsys):
    from stragglerlab.workloads.run_lifecycle import interrupted_error

    def run(args):  # after an earlier SIGTERM in this process: main() forgets it
        assert interrupted_error(KeyboardInterrupt())["message"] == "Ctrl-C"
        raise KeyboardInterrupt

    fake_verb(run)
    assert cli.main(["clean"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_sigterm_replaced_by_a_plain_ctrl_c_on_the_way_still_exits_143(fake_verb, capsys):
    # Ray's blocking calls catch the handler's exception and raise KeyboardInterrupt anew.
    from stragglerlab.workloads.run_lifecycle import interrupted_error

    seen = {}

    def run(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        except KeyboardInterrupt:
            seen["error"] = interrupted_error(KeyboardInterrupt())
            raise KeyboardInterrupt from None
        return 0

    fake_verb(run)
    assert cli.main(["clean"]) == 143
    assert seen["error"] == {"rank": None, "kind": "interrupted", "message": "SIGTERM"}
    assert "terminated (SIGTERM)" in capsys.readouterr().err
