"""`stragglerlab monitor` (issue 32): tail, windows, history, alerts, metrics, page, CLI.

Each test replays a `stragglerlab synth` trace into a tmp run folder's trace
parts step by step (stragglerlab.monitor.feed.PartsFeeder) and watches it with
the monitor, as it would watch a training run.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.errors import InputError
from stragglerlab.meta import JobMeta
from stragglerlab.monitor import Monitor, MonitorConfig
from stragglerlab.monitor.config import check_host
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.monitor.history import append_line, read_lines
from stragglerlab.monitor.metrics import metrics_text
from stragglerlab.run_folder import RunFolder
from stragglerlab.trace_parts import RECORD

FAULT_FIRST = 5
"""The synthetic slow worker (DP 1, stage 1) starts at this step."""


def _synth(out: Path, *extra: str) -> Path:
    assert main(["synth", "--out", str(out), "--dp", "2", "--pp", "2", "--quiet", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def slow_src(tmp_path_factory) -> Path:
    """12 steps, DP 1 / stage 1 twice as slow from step 5 on."""
    return _synth(tmp_path_factory.mktemp("src") / "slow", "--steps", "12",
                  "--slow", f"1,1,2.0,{FAULT_FIRST}")


@pytest.fixture(scope="module")
def window_src(tmp_path_factory) -> Path:
    """20 steps, DP 1 / stage 1 slow over steps 4-7 only."""
    return _synth(tmp_path_factory.mktemp("src") / "window", "--steps", "20",
                  "--slow", "1,1,2.0,4,7")


def _feeder(src: Path, run: Path) -> PartsFeeder:
    return PartsFeeder(run, RunFolder(path=src).trace())


def _monitor(run: Path, **kw) -> Monitor:
    kw.setdefault("alert_backoff_s", 0.01)
    return Monitor(MonitorConfig(run=run, **kw))


def _named(window: dict) -> set[tuple[str, int, int]]:
    return {(f["cause"], r["dp_rank"], r["stage"]) for f in window["findings"] for r in f["ranks"]}


def test_a_window_per_complete_step_and_none_before(tmp_path, slow_src):
    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path)
    feeder.write_step(0, ranks=[0, 1, 2])  # rank 3 has not flushed step 0: not complete
    assert mon.poll() == []
    feeder.write_step(0, ranks=[3])
    windows = mon.poll()
    assert [w["step"] for w in windows] == [0]
    for step in feeder.steps[1:4]:
        feeder.write_step(step)
        [w] = mon.poll()
        assert w["step"] == step and w["steps"] == list(range(step + 1))
        assert w["schema"] == "stragglerlab.monitor-window/1"
        assert len(w["worker_slowdown"]) == 2 and len(w["worker_slowdown"][0]) == 2
    lines = read_lines(tmp_path / "monitor" / "windows.jsonl")
    assert [x["step"] for x in lines] == [0, 1, 2, 3]
    mon.sender.close()


def test_the_window_is_the_last_k_complete_steps(tmp_path, slow_src):
    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path, window_steps=3)
    for step in feeder.steps[:6]:
        feeder.write_step(step)
    windows = mon.poll()  # several steps at once: one window per step
    assert [w["steps"] for w in windows][-2:] == [[2, 3, 4], [3, 4, 5]]
    mon.sender.close()


def test_a_torn_trailing_record_waits_for_the_next_look(tmp_path, slow_src):
    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path)
    feeder.write_step(0)
    mon.poll()
    # Step 1 of rank 2 caught half written: the whole records are read, the torn one waits.
    part = feeder.part_path(2)
    before = part.read_bytes()
    feeder.write_step(1)
    step1 = part.read_bytes()[len(before):]
    part.write_bytes(before + step1[:RECORD.itemsize * 3 + 17])
    status = tmp_path / "status" / "rank2.json"
    status.write_text(json.dumps({"rank": 2, "step": 0}))  # the status follows the flush
    assert mon.poll() == []  # rank 2 has not all of step 1, and its status says 0
    status.write_text(json.dumps({"rank": 2, "step": 1}))
    part.write_bytes(before + step1)
    [w] = mon.poll()
    assert w["step"] == 1 and not mon.tail.errors
    assert mon.tail.ranks[2].offset == len(before + step1)
    mon.sender.close()


def test_a_restarted_monitor_resumes_after_the_last_window(tmp_path, slow_src):
    feeder = _feeder(slow_src, tmp_path)
    for step in feeder.steps[:6]:
        feeder.write_step(step)
    assert _monitor(tmp_path).run(once=True) == 6
    for step in feeder.steps[6:]:
        feeder.write_step(step)
    again = _monitor(tmp_path)
    assert again.last_step == 5
    assert again.run(once=True) == 6
    steps = [x["step"] for x in read_lines(tmp_path / "monitor" / "windows.jsonl")]
    assert steps == list(range(12))  # nothing analysed twice
    assert again.state.windows_analysed == 12


def test_a_slow_worker_is_named_within_three_steps_in_history_and_metrics(tmp_path, slow_src):
    from starlette.testclient import TestClient

    from stragglerlab.monitor.server import make_app

    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path)
    first_named = None
    for step in feeder.steps:
        feeder.write_step(step)
        for w in mon.poll():
            if first_named is None and ("slow-worker", 1, 1) in _named(w):
                first_named = w["step"]
    mon.sender.close()
    assert first_named is not None and FAULT_FIRST <= first_named <= FAULT_FIRST + 2
    history = read_lines(tmp_path / "monitor" / "windows.jsonl")
    assert ("slow-worker", 1, 1) in _named(history[-1])
    with TestClient(make_app(mon.state, tmp_path)) as client:
        r = client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        text = r.text
    assert 'stragglerlab_findings{cause="slow-worker"} 1' in text
    assert "stragglerlab_steps_analysed_total 12" in text
    scores = {m[0]: float(m[1]) for m in re.findall(
        r'^stragglerlab_worker_slowdown\{(dp_rank="\d+",stage="\d+")\} (\S+)$', text, re.M)}
    assert max(scores, key=scores.get) == 'dp_rank="1",stage="1"'


def test_the_webhook_gets_exactly_one_alert_when_the_finding_appears(tmp_path, slow_src,
                                                                     webhook):
    url, received = webhook
    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path, webhook=url)
    for step in feeder.steps:
        feeder.write_step(step)
        mon.poll()
    mon.sender.close()
    assert [a["event"] for a in received] == ["finding-appeared"]
    alert = received[0]
    assert alert["schema"] == "stragglerlab.monitor-alert/1"
    assert alert["finding"]["cause"] == "slow-worker"
    assert [(r["dp_rank"], r["stage"]) for r in alert["finding"]["ranks"]] == [(1, 1)]
    assert FAULT_FIRST <= alert["step"] <= FAULT_FIRST + 2
    kept = read_lines(tmp_path / "monitor" / "alerts.jsonl")
    assert len(kept) == 1 and kept[0]["delivered_to"] == ["webhook"]
    assert not (tmp_path / "monitor" / "alerts-failed.jsonl").exists()


def test_the_finding_clears_after_the_fault_window(tmp_path, window_src):
    feeder, mon = _feeder(window_src, tmp_path), _monitor(tmp_path, window_steps=4)
    for step in feeder.steps:
        feeder.write_step(step)
        mon.poll()
    mon.sender.close()
    events = [(a["alert"]["event"], a["alert"]["step"])
              for a in read_lines(tmp_path / "monitor" / "alerts.jsonl")]
    assert [e for e, _ in events] == ["finding-appeared", "finding-cleared"]
    # The fault's last step (7) leaves a 4-step window at step 11; cleared 2 windows on.
    assert 11 <= events[1][1] <= 13
    assert mon.state.latest_window()["findings"] == []


def test_a_failed_delivery_is_kept_not_lost(tmp_path, slow_src):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    feeder = _feeder(slow_src, tmp_path)
    for step in feeder.steps:
        feeder.write_step(step)
    mon = _monitor(tmp_path, webhook=f"http://127.0.0.1:{port}/x", alert_retries=2,
                   alert_command="exit 3")
    mon.run(once=True)
    [failed] = read_lines(tmp_path / "monitor" / "alerts-failed.jsonl")
    assert failed["alert"]["event"] == "finding-appeared"
    assert failed["attempts"] == {"webhook": 2, "command": 2}
    assert set(failed["errors"]) == {"webhook", "command"}
    assert "alert finding-appeared" in (tmp_path / "monitor" / "monitor.log").read_text()


def test_a_garbage_part_is_an_error_in_the_history_not_a_crash(tmp_path, slow_src):
    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path)
    feeder.write_step(0)
    mon.poll()
    with open(feeder.part_path(1), "ab") as f:
        f.write(b"\xff" * RECORD.itemsize * 4)  # op type -1, steps out of range
    feeder.write_step(1)
    assert mon.poll() == []  # rank 1's step 1 is behind garbage: step 1 never completes
    assert mon.poll() == []  # and the error is recorded once
    errors = [x for x in read_lines(tmp_path / "monitor" / "windows.jsonl")
              if x["kind"] == "error"]
    assert len(errors) == 1 and errors[0]["rank"] == 1
    assert "garbage at byte" in errors[0]["message"] and "rank1.bin" in errors[0]["message"]
    assert mon.state.errors == 1
    assert "stragglerlab_monitor_errors_total 1" in metrics_text(mon.state.latest_window(), 1, 1)
    mon.sender.close()


def test_the_page_the_api_and_the_event_stream(tmp_path, slow_src):
    from starlette.testclient import TestClient

    from stragglerlab.monitor.server import make_app

    feeder = _feeder(slow_src, tmp_path)
    for step in feeder.steps[:3]:
        feeder.write_step(step)
    (tmp_path / "faults.json").write_bytes((slow_src / "faults.json").read_bytes())
    mon = _monitor(tmp_path)
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
        assert body.count("event: line") == 2 and '"step": 2' in body
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
        with pytest.raises(InputError, match="cannot listen on"):
            bind("127.0.0.1", held.getsockname()[1])
    finally:
        held.close()
    mon = _monitor(tmp_path)
    lock = mon._lock()
    try:
        with pytest.raises(InputError, match="another monitor"):
            _monitor(tmp_path).run(once=True)
    finally:
        lock.close()
        mon.sender.close()


def test_cli_once_prints_the_summary(tmp_path, slow_src, capsys):
    feeder = _feeder(slow_src, tmp_path)
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


def test_history_lines_are_whole_after_a_torn_append(tmp_path):
    path = tmp_path / "monitor" / "windows.jsonl"
    append_line(path, {"kind": "window", "step": 1})
    with open(path, "ab") as f:
        f.write(b'{"kind": "window", "st')  # a crash mid-append
    assert [x["step"] for x in read_lines(path)] == [1]
    append_line(path, {"kind": "window", "step": 2})
    assert [x["step"] for x in read_lines(path)] == [1, 2]


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


def test_gc_pauses_become_the_gc_pause_column(tmp_path, slow_src):
    feeder, mon = _feeder(slow_src, tmp_path), _monitor(tmp_path)
    feeder.write_step(0)
    raw = mon.tail.poll()
    mon.buffer.add(raw)
    op = raw[2][0]  # rank 2's first op of step 0
    third = (op["end"] - op["start"]) / 3
    gc_log = tmp_path / "gc" / "rank2.jsonl"
    gc_log.parent.mkdir()
    gc_log.write_text(json.dumps({"step": 0, "start": float(op["start"] + third),
                                  "duration_s": float(third), "generation": 2}) + "\n"
                      + "not json\n" + '{"step": 0, "sta')  # a bad line, a torn one
    mon.gc.poll()
    df = mon.buffer.frame([0], JobMeta(dp_size=2, pp_size=2))
    mon.gc.add_column(df)
    paused = df[df["gc_pause_s"] > 0]
    assert len(paused) == 1 and paused["rank"].tolist() == [2]
    assert paused["gc_pause_s"].iloc[0] == pytest.approx(third, rel=1e-6)
    assert mon.gc.offsets[2] == len(gc_log.read_bytes()) - len('{"step": 0, "sta')
    mon.sender.close()


def test_the_monitor_stops_when_the_run_ends(tmp_path, slow_src):
    feeder = _feeder(slow_src, tmp_path)
    mon = _monitor(tmp_path, poll_s=0.05)

    def train():
        for step in feeder.steps[:5]:
            feeder.write_step(step)
            time.sleep(0.05)
        (tmp_path / "run.json").write_text("{}")  # the run ended

    thread = threading.Thread(target=train)
    thread.start()
    n = mon.run()  # returns by itself once run.json is there and everything is analysed
    thread.join()
    assert n == 5 and mon.state.finished and mon.state.run_ended
    assert "the run ended" in (tmp_path / "monitor" / "monitor.log").read_text()


def test_sigterm_stops_a_serving_monitor_cleanly(tmp_path, slow_src):
    feeder = _feeder(slow_src, tmp_path)
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


def test_a_run_folder_deleted_mid_run_is_a_clear_error(tmp_path, slow_src):
    import shutil

    run = tmp_path / "run"
    feeder = _feeder(slow_src, run)
    feeder.write_step(0)
    mon = _monitor(run)
    mon.poll()
    shutil.rmtree(run)
    with pytest.raises(InputError, match="run folder is gone"):
        mon.run(once=True)
    assert not run.exists()  # nothing made again
