"""`stragglerlab monitor` (issue 32): tail, windows, history, alerts, gc, end of run.

Each test replays a `stragglerlab synth` trace into a tmp run folder's trace
parts step by step (stragglerlab.monitor.feed.PartsFeeder) and watches it with
the monitor, as it would watch a training run (tests/unit/monitor_helpers.py).
The page, the server, metrics and the CLI: test_monitor_server.py.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

from stragglerlab.monitor.history import append_line, read_lines
from stragglerlab.monitor.metrics import metrics_text
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.trace_parts import RECORD
from stragglerlab.util.errors import InputError
from tests.unit.monitor_helpers import FAULT_FIRST, make_feeder, make_monitor, named


def test_a_window_per_complete_step_and_none_before(tmp_path, slow_src):
    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path)
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
    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path, window_steps=3)
    for step in feeder.steps[:6]:
        feeder.write_step(step)
    windows = mon.poll()  # several steps at once: one window per step
    assert [w["steps"] for w in windows][-2:] == [[2, 3, 4], [3, 4, 5]]
    mon.sender.close()


def test_a_torn_trailing_record_waits_for_the_next_look(tmp_path, slow_src):
    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path)
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
    feeder = make_feeder(slow_src, tmp_path)
    for step in feeder.steps[:6]:
        feeder.write_step(step)
    assert make_monitor(tmp_path).run(once=True) == 6
    for step in feeder.steps[6:]:
        feeder.write_step(step)
    again = make_monitor(tmp_path)
    assert again.last_step == 5
    assert again.run(once=True) == 6
    steps = [x["step"] for x in read_lines(tmp_path / "monitor" / "windows.jsonl")]
    assert steps == list(range(12))  # nothing analysed twice
    assert again.state.windows_analysed == 12


def test_a_slow_worker_is_named_within_three_steps_in_history_and_metrics(tmp_path, slow_src):
    from starlette.testclient import TestClient

    from stragglerlab.monitor.server import make_app

    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path)
    first_named = None
    for step in feeder.steps:
        feeder.write_step(step)
        for w in mon.poll():
            if first_named is None and ("slow-worker", 1, 1) in named(w):
                first_named = w["step"]
    mon.sender.close()
    assert first_named is not None and FAULT_FIRST <= first_named <= FAULT_FIRST + 2
    history = read_lines(tmp_path / "monitor" / "windows.jsonl")
    assert ("slow-worker", 1, 1) in named(history[-1])
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
    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path, webhook=url)
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
    feeder, mon = make_feeder(window_src, tmp_path), make_monitor(tmp_path, window_steps=4)
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
    feeder = make_feeder(slow_src, tmp_path)
    for step in feeder.steps:
        feeder.write_step(step)
    mon = make_monitor(tmp_path, webhook=f"http://127.0.0.1:{port}/x", alert_retries=2,
                   alert_command="exit 3")
    mon.run(once=True)
    [failed] = read_lines(tmp_path / "monitor" / "alerts-failed.jsonl")
    assert failed["alert"]["event"] == "finding-appeared"
    assert failed["attempts"] == {"webhook": 2, "command": 2}
    assert set(failed["errors"]) == {"webhook", "command"}
    assert "alert finding-appeared" in (tmp_path / "monitor" / "monitor.log").read_text()


def test_a_garbage_part_is_an_error_in_the_history_not_a_crash(tmp_path, slow_src):
    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path)
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


def test_history_lines_are_whole_after_a_torn_append(tmp_path):
    path = tmp_path / "monitor" / "windows.jsonl"
    append_line(path, {"kind": "window", "step": 1})
    with open(path, "ab") as f:
        f.write(b'{"kind": "window", "st')  # a crash mid-append
    assert [x["step"] for x in read_lines(path)] == [1]
    append_line(path, {"kind": "window", "step": 2})
    assert [x["step"] for x in read_lines(path)] == [1, 2]


def test_gc_pauses_become_the_gc_pause_column(tmp_path, slow_src):
    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path)
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
    feeder = make_feeder(slow_src, tmp_path)
    mon = make_monitor(tmp_path, poll_s=0.05)

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


def test_a_run_folder_deleted_mid_run_is_a_clear_error(tmp_path, slow_src):
    import shutil

    run = tmp_path / "run"
    feeder = make_feeder(slow_src, run)
    feeder.write_step(0)
    mon = make_monitor(run)
    mon.poll()
    shutil.rmtree(run)
    with pytest.raises(InputError, match="run folder is gone"):
        mon.run(once=True)
    assert not run.exists()  # nothing made again


def test_a_record_that_ends_before_it_starts_is_garbage():
    import numpy as np

    from stragglerlab.monitor.tail import check_records

    rec = np.zeros(2, dtype=RECORD)
    rec["step"] = 3
    rec["start"], rec["end"] = [1.0, 2.0], [1.5, 1.9]
    assert check_records(rec, 3) == "an op of step 3 ends before it starts (1.900000 < 2.000000 s)"
    rec["end"][1] = 2.5
    assert check_records(rec, 3) is None


def test_all_ranks_checked_at_once_agree_with_each_rank_checked_alone():
    """trace_parts.all_fine (the tail's one check of every rank's new records) is True
    exactly when check_records finds nothing in any rank's, whatever is wrong where."""
    import numpy as np

    from stragglerlab.trace.trace_parts import all_fine, check_records

    def chunk(steps):
        rec = np.zeros(len(steps), dtype=RECORD)
        rec["step"] = steps
        rec["start"] = np.arange(len(steps), dtype=float)
        rec["end"] = rec["start"] + 0.5
        return rec

    spoil = {
        "op type": lambda c: c["optype"].__setitem__(-1, 200),
        "negative step": lambda c: c["step"].__setitem__(0, -1),
        "backwards": lambda c: c["step"].__setitem__(-1, 0),
        "nan": lambda c: c["start"].__setitem__(0, np.nan),
        "absurd time": lambda c: c["end"].__setitem__(0, 1e11),
        "ends first": lambda c: c["end"].__setitem__(1, 0.0),
    }
    for where in range(3):
        for name, how in [("none", None), *spoil.items()]:
            chunks = [chunk([4, 4, 5]), chunk([4, 5, 5]), chunk([5, 5, 5])]
            if how:
                how(chunks[where])
            lasts = [4, 3, 5]
            want = all(check_records(c, last) is None for c, last in zip(chunks, lasts))
            assert all_fine(chunks, lasts) == want, (name, where)
            assert want == (how is None)
        # A rank's records behind its last step, and steps that only go back across ranks.
        chunks = [chunk([6, 7]), chunk([2, 3])]
        assert all_fine(chunks, [6, 2]) and not all_fine(chunks, [6, 3])


def test_once_over_garbage_parts_exits_2_and_a_parts_file_is_refused(tmp_path, slow_src,
                                                                      capsys):
    import shutil

    from stragglerlab.cli import main

    feeder = make_feeder(slow_src, tmp_path)
    for step in feeder.steps:
        feeder.write_step(step)
    shutil.copy(slow_src / "meta.yaml", tmp_path / "meta.yaml")
    with open(feeder.part_path(1), "r+b") as f:
        f.write(b"\xff" * RECORD.itemsize)  # the first record: op type -1
    assert main(["monitor", "--run", str(tmp_path), "--once", "--no-serve", "--quiet"]) == 2
    assert "error(s) while reading the run" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(slow_src / "meta.yaml", other / "meta.yaml")
    (other / "trace-parts").write_text("x")
    assert main(["monitor", "--run", str(other), "--once", "--no-serve", "--quiet"]) == 2
    assert "trace-parts is not a folder" in capsys.readouterr().err


def test_the_noise_floor_given_holds_the_windows_findings(tmp_path, slow_src):
    from stragglerlab.analysis.detectors.whatif_config import RATIOS
    from stragglerlab.analysis.detectors.whatif_noise import RELAXED
    from stragglerlab.method.noise_floor import FamilyFloor, NoiseFloor, write_noise_floor
    from stragglerlab.trace.meta import LayoutFamily

    # A floor whose clean runs reached 3x their peers in every ratio statistic, in 8-step
    # windows: the 2x slow worker stands under it, so no window names it.
    path = tmp_path / "floor" / "noise-floor.yaml"
    path.parent.mkdir()
    write_noise_floor(path, NoiseFloor(families={LayoutFamily.DP_PP: FamilyFloor(
        n_runs=2, layouts=("dp2-pp2",), online={8: {k: 3.0 for k in RATIOS if k in RELAXED}})}))
    named_by = {}
    for floor in (str(path), "none"):
        run = tmp_path / floor.replace("/", "_")
        feeder, mon = make_feeder(slow_src, run), make_monitor(run, noise_floor=floor)
        for step in feeder.steps:
            feeder.write_step(step)
            mon.poll()
        mon.sender.close()
        named_by[floor] = set().union(*map(named, read_lines(run / "monitor" / "windows.jsonl")))
    assert ("slow-worker", 1, 1) in named_by["none"]
    assert not any(cause == "slow-worker" for cause, *_ in named_by[str(path)])
    path.write_text("schema: stragglerlab.noise-floor/1\nfamilies: {dp+pp: {n_runs: 0}}\n")
    with pytest.raises(InputError, match="n_runs"):
        make_monitor(tmp_path / "bad", noise_floor=str(path))


def test_window_frame_from_cached_steps_is_records_frame(tmp_path, slow_src):
    """The window's frame, built from each step's rows sorted once, is the frame of the
    window's records, as the window slides, when late records change a buffered step, and
    when the shift to the window's first op would round two starts into one."""
    import numpy as np
    import pandas as pd

    from stragglerlab.monitor.steps import StepBuffer, records_frame

    feeder, mon = make_feeder(slow_src, tmp_path), make_monitor(tmp_path)
    meta = JobMeta(dp_size=2, pp_size=2)
    for step in feeder.steps:
        feeder.write_step(step)
        mon.buffer.add(mon.tail.poll())
        steps = sorted(mon.buffer.present[0])[-3:]
        pd.testing.assert_frame_equal(mon.buffer.frame(steps, meta),
                                      records_frame(mon.buffer.raw(steps), 2), check_exact=True)
        mon.buffer.prune(steps[-1] - 1)
    # Only the steps a window still needs are held: records and sorted blocks alike, and
    # the steps known per rank (a long run must not grow them by a step a rank a step).
    assert sorted(mon.buffer.blocks) == sorted(mon.buffer.by_step) == steps[-2:]
    assert all(s <= set(steps[-2:]) for s in mon.buffer.present.values())
    assert all(s <= set(steps[-2:]) for s in mon.buffer.optimizer_steps.values())
    assert any(mon.buffer.optimizer_steps.values())  # the last step's optimizer kept
    mon.sender.close()

    def records(steps, starts, seq):
        rec = np.zeros(len(steps), dtype=RECORD)
        rec["step"], rec["start"], rec["seq_id"] = steps, starts, seq
        rec["end"] = rec["start"] + 0.5
        return rec

    buf, one = StepBuffer(4), JobMeta(dp_size=1, pp_size=1)
    # Before the shift, 1.0 and the next float are two starts; 1.0 below zero, one.
    buf.add({0: records([0, 1, 1], [-1.0, np.nextafter(1.0, 2.0), 1.0], [0, 1, 2])})
    frame = buf.frame([0, 1], one)
    pd.testing.assert_frame_equal(frame, records_frame(buf.raw([0, 1]), 1), check_exact=True)
    assert frame["seq_id"].tolist() == [0, 1, 2]  # tied after the shift: record order
    buf.add({0: records([1, 0], [0.5, -2.0], [3, 4])})  # late records of both steps
    pd.testing.assert_frame_equal(buf.frame([0, 1], one), records_frame(buf.raw([0, 1]), 1),
                                  check_exact=True)
    assert len(buf.frame([0, 1], one)) == 5


def test_every_window_knows_the_first_step_the_monitor_saw(tmp_path, slow_src, monkeypatch):
    # A window's detectors take it for the run's start (a slower regime from there has no
    # onset the monitor saw); a window of the last k steps must not take its own first.
    import stragglerlab.monitor.runner as runner

    seen = []

    def spy(*args, first_step=None, **kw):
        seen.append(first_step)
        return analyse(*args, first_step=first_step, **kw)

    analyse = runner.analyse_window
    monkeypatch.setattr(runner, "analyse_window", spy)
    feeder = make_feeder(slow_src, tmp_path)
    for step in feeder.steps[:6]:
        feeder.write_step(step)
    assert make_monitor(tmp_path, window_steps=3).run(once=True) == 6
    for step in feeder.steps[6:8]:
        feeder.write_step(step)
    assert make_monitor(tmp_path, window_steps=3).run(once=True) == 2  # resumed
    assert seen == [feeder.steps[0]] * 8
