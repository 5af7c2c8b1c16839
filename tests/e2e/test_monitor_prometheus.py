"""The live monitor's /metrics scraped by a real Prometheus server (issue 32, slow tier).

Prometheus (the distribution's `prometheus` binary, a tmp config and storage,
127.0.0.1) scrapes /metrics every second while a run grows (tests/e2e/monitor_live.py);
its query API must return the victim's
`stragglerlab_worker_slowdown{dp_rank="1",stage="1"}` above every other worker's. Skips,
saying why, when the binary is absent; stopped by PID at teardown.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_prometheus.py -s
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import urllib.parse

import pytest

from tests.e2e.monitor_live import FAULT_FIRST, VICTIM, WINDOW, text, wait_for, which

pytestmark = pytest.mark.slow


def _free_port() -> int:
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
        port = _free_port()
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


def _query(url: str, promql: str) -> list[dict]:
    data = json.loads(text(url + "api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_a_real_prometheus_scrapes_the_victims_series(prometheus, live):
    prom = prometheus(live.hostport)
    wait_for("Prometheus's first scrape of the monitor (up == 1)", lambda: [
        r for r in _query(prom, 'up{job="stragglerlab"}') if r["value"][1] == "1"], 30, 0.5)
    live.grow(FAULT_FIRST + WINDOW)
    wait_for("the monitor to analyse the steps", lambda: live.last_step() == live.written, 30)

    def victim_on_top():
        rows = _query(prom, 'stragglerlab_worker_slowdown{job="stragglerlab"}')
        by = {(int(r["metric"]["dp_rank"]), int(r["metric"]["stage"])): float(r["value"][1])
              for r in rows}
        last = _query(prom, 'stragglerlab_last_step{job="stragglerlab"}')
        if len(by) == 4 and last and float(last[0]["value"][1]) == live.written:
            return by
        return None

    by = wait_for("Prometheus to hold the latest window's worker series", victim_on_top, 30, 0.5)
    others = {k: v for k, v in by.items() if k != VICTIM}
    assert by[VICTIM] > 1.2 and by[VICTIM] > max(others.values()), by
    found = _query(prom, 'stragglerlab_findings{job="stragglerlab",cause="slow-worker"}')
    assert found and float(found[0]["value"][1]) >= 1, found
    # The README's Grafana panel queries, as written there.
    job = _query(prom, 'stragglerlab_job_slowdown{job="stragglerlab"}')
    assert job and float(job[0]["value"][1]) > 1.2, job
    panel = _query(prom, 'max by (dp_rank, stage) '
                         '(stragglerlab_worker_slowdown{job="stragglerlab"}) > 1.1')
    assert [(r["metric"]["dp_rank"], r["metric"]["stage"]) for r in panel] == [("1", "1")], panel
    print(f"\nPrometheus: worker slowdown {by}")
    assert "Traceback" not in live.stop()
