"""`stragglerlab monitor` (issue 32): the page, the API, the event stream, /metrics, the
real server, its host and port checks, signals and the CLI (tests/unit/monitor_helpers.py)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.config import check_host
from stragglerlab.monitor.metrics import metrics_text
from stragglerlab.util.errors import InputError
from tests.unit.monitor_helpers import make_feeder, make_monitor


def test_the_page_the_api_and_the_event_stream(tmp_path, slow_src):
    from starlette.testclient import TestClient

    from stragglerlab.monitor.server import make_app

    feeder = make_feeder(slow_src, tmp_path)
    for step in feeder.steps[:3]:
        feeder.write_step(step)
    (tmp_path / "faults.json").write_bytes((slow_src / "faults.json").read_bytes())
    mon = make_monitor(tmp_path)
    mon.run(once=True)
    with TestClient(make_app(mon.state, tmp_path)) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<canvas id="heat"' in page.text and "EventSource" in page.text
        assert "http://" not in page.text and "https://" not in page.text  # no CDN
        data = client.get("/api/windows").json()
        assert [x["step"] for x in data["lines"]] == [0, 1, 2]
        assert data["summary"]["layout"] == [2, 2]
        assert [x["seq"] for x in client.get("/api/windows?after=1").json()["lines"]] == [2]
        truth = client.get("/api/truth").json()
        assert truth["available"] and truth["faults"][0]["kind"] == "slow-worker"
        with client.stream("GET", "/events?after=0&limit=2") as r:
            body = "".join(r.iter_text())
        assert body.count("event: line") == 2 and '"step":2,' in body
    closing = threading.Event()
    closing.set()  # the monitor stopping: the stream sends what is left, then `end`
    with TestClient(make_app(mon.state, tmp_path, closing)) as client:
        with client.stream("GET", "/events?after=0") as r:
            body = "".join(r.iter_text())
        assert body.count("event: line") == 2 and body.rstrip().split("\n")[-2] == "event: end"
        assert client.get("/trace.parquet").status_code == 404  # nothing else is served
        assert client.get("/faults.json").status_code == 404


def test_a_non_loopback_host_needs_allow_remote(tmp_path, slow_src, capsys):
    assert check_host("127.0.0.1", False) is False and check_host("::1", False) is False
    assert check_host("localhost", False) is False
    with pytest.raises(InputError, match="--allow-remote"):
        check_host("0.0.0.0", False)
    assert check_host("0.0.0.0", True) is True
    assert main(["monitor", "--run", str(slow_src), "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_a_port_in_use_and_a_second_monitor_are_clear_errors(tmp_path, slow_src):
    from stragglerlab.monitor.server import bind

    held = bind("127.0.0.1", 0)
    try:
        with pytest.raises(InputError, match="cannot listen on.*holds the port"):
            bind("127.0.0.1", held.getsockname()[1])
    finally:
        held.close()
    # An address of no interface here (TEST-NET-3) is named as such, not as a held port.
    with pytest.raises(InputError, match="203.0.113.7 is no address of this host"):
        bind("203.0.113.7", 0)
    mon = make_monitor(tmp_path)
    lock = mon._lock()
    try:
        with pytest.raises(InputError, match="another monitor"):
            make_monitor(tmp_path).run(once=True)
    finally:
        lock.close()
        mon.sender.close()


def test_cli_once_prints_the_summary(tmp_path, slow_src, capsys):
    feeder = make_feeder(slow_src, tmp_path)
    for step in feeder.steps:
        feeder.write_step(step)
    assert main(["monitor", "--run", str(tmp_path), "--once", "--quiet"]) == 0
    out = capsys.readouterr()
    assert "12 window(s) analysed now" in out.out and "slow-worker" in out.out
    assert out.err == ""
    assert main(["monitor", "--run", str(tmp_path / "nope"), "--once"]) == 2


def test_metrics_text_follows_the_exposition_format():
    window = {"slowdown": 1.25, "step": 9, "lag_s": 0.2, "lag_from_step_end_s": None,
              "worker_slowdown": [[1.0, 1.5]], "stage_slowdown": {"0": 1.2},
              "optype_slowdown": {"forward-compute": 1.2},
              "findings": [{"cause": "slow-worker", "estimated_slowdown": 1.4, "ranks": []}]}
    text = metrics_text(window, 3, 0)
    sample = re.compile(r'^[a-z_:][a-z0-9_:]*(\{([a-z_]+="[^"\\\n]*",?)*\})? \S+$')
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), line
    assert "# TYPE stragglerlab_steps_analysed_total counter" in text
    assert "stragglerlab_job_slowdown 1.25" in text
    assert 'stragglerlab_worker_slowdown{dp_rank="1",stage="0"} 1.5' in text
    assert 'stragglerlab_cause_slowdown{cause="slow-worker"} 1.4' in text
    assert 'stragglerlab_findings{cause="gc-pauses"} 0' in text
    assert "stragglerlab_analysis_lag_seconds 0.2" in text


def test_the_real_server_serves_on_loopback_and_stops(tmp_path, slow_src):
    from stragglerlab.monitor.server import MonitorServer
    from stragglerlab.monitor.state import MonitorState

    state = MonitorState(str(tmp_path))
    server = MonitorServer(state, tmp_path, "127.0.0.1", 0)
    server.start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url + "metrics", timeout=5) as r:
            assert b"stragglerlab_steps_analysed_total 0" in r.read()
    finally:
        server.stop()
    assert not server.thread.is_alive()


def test_sigterm_stops_a_serving_monitor_cleanly(tmp_path, slow_src):
    feeder = make_feeder(slow_src, tmp_path)
    feeder.write_step(0)
    proc = subprocess.Popen([sys.executable, "-m", "stragglerlab", "monitor", "--run",
                             str(tmp_path), "--port", "0"], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "monitor page:" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "monitor page: http://127.0.0.1:" in line
        url = line.split()[2]
        with urllib.request.urlopen(url + "api/windows", timeout=10) as r:
            assert json.loads(r.read())["summary"]["run"] == str(tmp_path)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
