"""The live monitor's /metrics scraped by a real Prometheus server (issue 32, slow tier).

Prometheus (the distribution's `prometheus` binary, a tmp config and storage,
127.0.0.1; the `prometheus` fixture of tests/e2e/conftest.py) scrapes /metrics every
second while a run grows (tests/e2e/monitor_live.py); its query API must return the victim's
`stragglerlab_worker_slowdown{dp_rank="1",stage="1"}` above every other worker's. Skips,
saying why, when the binary is absent; stopped by PID at teardown.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_prometheus.py -s
"""

from __future__ import annotations

import pytest

from tests.e2e.monitor_live import FAULT_FIRST, VICTIM, WINDOW, query, wait_for

pytestmark = pytest.mark.slow


def test_a_real_prometheus_scrapes_the_victims_series(prometheus, live):
    prom = prometheus(live.hostport)
    wait_for("Prometheus's first scrape of the monitor (up == 1)", lambda: [
        r for r in query(prom, 'up{job="stragglerlab"}') if r["value"][1] == "1"], 30, 0.5)
    live.grow(FAULT_FIRST + WINDOW)
    wait_for("the monitor to analyse the steps", lambda: live.last_step() == live.written, 30)

    def victim_on_top():
        rows = query(prom, 'stragglerlab_worker_slowdown{job="stragglerlab"}')
        by = {(int(r["metric"]["dp_rank"]), int(r["metric"]["stage"])): float(r["value"][1])
              for r in rows}
        last = query(prom, 'stragglerlab_last_step{job="stragglerlab"}')
        if len(by) == 4 and last and float(last[0]["value"][1]) == live.written:
            return by
        return None

    by = wait_for("Prometheus to hold the latest window's worker series", victim_on_top, 30, 0.5)
    others = {k: v for k, v in by.items() if k != VICTIM}
    assert by[VICTIM] > 1.2 and by[VICTIM] > max(others.values()), by
    found = query(prom, 'stragglerlab_findings{job="stragglerlab",cause="slow-worker"}')
    assert found and float(found[0]["value"][1]) >= 1, found
    # The README's Grafana panel queries, as written there.
    job = query(prom, 'stragglerlab_job_slowdown{job="stragglerlab"}')
    assert job and float(job[0]["value"][1]) > 1.2, job
    panel = query(prom, 'max by (dp_rank, stage) '
                         '(stragglerlab_worker_slowdown{job="stragglerlab"}) > 1.1')
    assert [(r["metric"]["dp_rank"], r["metric"]["stage"]) for r in panel] == [("1", "1")], panel
    print(f"\nPrometheus: worker slowdown {by}")
    assert "Traceback" not in live.stop()
