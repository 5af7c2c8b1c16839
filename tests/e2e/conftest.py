"""Fixtures of the slow end-to-end tests."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest

from tests.e2e.monitor_live import LiveRun, text, wait_for, which


@pytest.fixture
def live(tmp_path):
    """A LiveRun in tmp_path, stopped at teardown."""
    mon = LiveRun(tmp_path / "run")
    yield mon
    mon.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path):
    """A factory: start(target host:port) -> the started server's base URL; stopped by
    PID at teardown."""
    binary = which("STRAGGLERLAB_PROMETHEUS", "prometheus")
    if binary is None:
        pytest.skip("no prometheus: none on PATH, and $STRAGGLERLAB_PROMETHEUS unset or not "
                    "executable (apt-get install prometheus)")
    procs: list[subprocess.Popen] = []

    def start(target: str) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: stragglerlab\n"
            "    scrape_interval: 1s\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n")
        port = free_port()
        log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}/"
        wait_for("Prometheus to be ready", lambda: proc.poll() is None and text(
            url + "-/ready").strip(), 30, 0.2)
        return url

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(f"\nPrometheus log: {tmp_path / 'prometheus.log'}")
