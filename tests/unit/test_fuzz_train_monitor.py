"""Fuzz: `train --monitor-args` is checked before any training: without
--monitor it is an error, and flags the monitor would refuse (parsed by the monitor verb's
own parser and checks) are one error line naming --monitor-args; a monitor that exits with
an error during the run is said on stderr. No run is launched here: the residue cleanup and
the launcher are made unimportable, so a check that let train go on fails the test."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.util.errors import InputError


@pytest.fixture
def no_launch(monkeypatch):
    """Importing what train runs after its checks fails: nothing may start."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for mod in ("stragglerlab.host.residue", "stragglerlab.workloads.launcher"):
        monkeypatch.setitem(sys.modules, mod, None)


def _train(tmp_path: Path, *flags: str) -> list[str]:
    return ["train", "--scenario", "clean-dp2-pp2", "--steps", "4", "--out",
            str(tmp_path / "run"), "--quiet", *flags]


def test_monitor_args_without_monitor_is_an_error(tmp_path, capsys, no_launch):
    assert main(_train(tmp_path, "--monitor-args", "--port notaport")) == 2
    err = capsys.readouterr().err
    assert err.startswith("stragglerlab train: error: --monitor-args '--port notaport': ")
    assert "add --monitor" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("extra", "message"), [
    ("--host 0.0.0.0", "--monitor-args: --host 0.0.0.0: not a loopback address"),
    ("--port notaport", "--monitor-args: argument --port: invalid int value"),
    ("--bogus", "--monitor-args: unrecognized arguments: --bogus"),
    ("--port 1 --port 2", "--monitor-args: --port is given twice"),
    ("--poll 0", "--monitor-args: --poll 0.0"),
    ("--webhook http://", "--monitor-args: --webhook 'http://': no host"),
    ("--detectors nope", "--monitor-args: unknown detector 'nope'"),
    ("--window-steps 0", "--monitor-args: --window-steps 0"),
    ("--once", "--monitor-args: --once stops the monitor"),
    ("--help", "--monitor-args: --help is not a flag"),
])
def test_bad_monitor_args_stop_train_before_the_job(tmp_path, capsys, no_launch, extra,
                                                    message):
    assert main(_train(tmp_path, "--monitor", f"--monitor-args={extra}")) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"stragglerlab train: error: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err and not out
    assert not (tmp_path / "run").exists()


def test_good_monitor_args_pass_the_check(tmp_path):
    from stragglerlab.cli.monitor import check_monitor_argv, monitor_argv

    scenario = load_scenario("clean-dp2-pp2")
    for extra in (None, "--port 0 --no-serve", "--host 0.0.0.0 --allow-remote --port 0",
                  "--webhook http://127.0.0.1:9/hook --slowdown-alert 1.2 --dp 4"):
        check_monitor_argv(monitor_argv(tmp_path / "run", scenario, extra))
    with pytest.raises(InputError, match="--monitor-args: --host 0.0.0.0"):
        check_monitor_argv(monitor_argv(tmp_path / "run", scenario, "--host 0.0.0.0"))


class _Progress:
    """A Reporter stand-in that keeps what is said."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, msg: str) -> None:
        self.errors.append(msg)


@pytest.mark.parametrize(("code", "said"), [(2, True), (1, True), (0, False), (130, False)])
def test_a_monitor_that_exits_with_an_error_is_said(tmp_path, code, said):
    from stragglerlab.cli.monitor import _report_exit

    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    progress = _Progress()
    _report_exit(proc, threading.Event(), progress, tmp_path / "run")
    assert bool(progress.errors) == said
    if said:
        assert f"exited with status {code}" in progress.errors[0]
        assert "unmonitored" in progress.errors[0]


def test_the_monitor_train_stops_is_not_reported(tmp_path):
    from stragglerlab.cli.monitor import _report_exit

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    stopping, progress = threading.Event(), _Progress()
    watcher = threading.Thread(target=_report_exit, args=(proc, stopping, progress, tmp_path))
    watcher.start()
    stopping.set()
    proc.terminate()
    watcher.join(10)
    assert not progress.errors
