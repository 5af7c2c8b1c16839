"""Streaming a node's trace parts to the monitor's host (stragglerlab.run.part_stream): duplicates,
out-of-order and late frames, garbage, truncated batches, a restarted receiver, and the
clock corrections the monitor applies from nodes.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from stragglerlab.run import part_stream as ps
from stragglerlab.trace.trace_parts import RECORD, read_records


def records(steps: list[int], t0: float = 100.0, ops: int = 3) -> np.ndarray:
    """`ops` forward-compute records per step, then the optimizer, one after another."""
    n = len(steps) * (ops + 1)
    rec = np.zeros(n, dtype=RECORD)
    rec["step"] = np.repeat(steps, ops + 1)
    rec["optype"] = np.tile([0] * ops + [14], len(steps))
    rec["start"] = t0 + np.arange(n) * 0.01
    rec["end"] = rec["start"] + 0.005
    return rec


def node_folder(tmp_path: Path, rank: int, rec: np.ndarray) -> Path:
    """A node's own run folder holding rank's trace part, GC log and status."""
    node = tmp_path / "node-b" / "run"
    (node / "trace-parts").mkdir(parents=True, exist_ok=True)
    (node / "trace-parts" / f"rank{rank}.bin").write_bytes(rec.tobytes())
    (node / "gc").mkdir(exist_ok=True)
    (node / "gc" / f"rank{rank}.jsonl").write_text('{"start": 1.0, "duration_s": 0.01}\n'
                                                   '{"start": 2.0, "dura')  # torn last line
    (node / "status").mkdir(exist_ok=True)
    (node / "status" / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "step": 1}))
    return node


def test_a_node_folder_streams_into_the_run_folder(tmp_path: Path):
    rec = records([0, 1])
    node = node_folder(tmp_path, 3, rec)
    run = tmp_path / "monitor" / "run"
    recv = ps.PartReceiver(run)
    seen: dict = {}
    got = recv.accept("node-b", ps.read_frames(node, [3], recv.positions(), status_seen=seen))
    assert got.errors == [] and got.frames == 3
    assert (run / "trace-parts" / "rank3.bin").read_bytes() == rec.tobytes()
    assert (run / "gc" / "rank3.jsonl").read_text().count("\n") == 1  # whole lines only
    assert json.loads((run / "status" / "rank3.json").read_text())["step"] == 1
    # Nothing new: an unchanged status is not sent again, the files are not re-sent.
    again = ps.read_frames(node, [3], recv.positions(), status_seen=seen)
    assert again == b""
    # The rank appends a step: only the new records travel.
    more = records([2], t0=200.0)
    with open(node / "trace-parts" / "rank3.bin", "ab") as f:
        f.write(more.tobytes())
    got = recv.accept("node-b", ps.read_frames(node, [3], recv.positions(), status_seen=seen))
    assert got.written_bytes == more.nbytes
    assert np.array_equal(read_records(run / "trace-parts" / "rank3.bin"),
                          np.concatenate([rec, more]))


def test_duplicates_and_overlaps_are_written_once(tmp_path: Path):
    rec = records([0, 1, 2])
    raw = rec.tobytes()
    recv = ps.PartReceiver(tmp_path / "run")
    one = ps.encode(ps.Kind.PART, 0, 0, raw[:8 * RECORD.itemsize])
    assert recv.accept("n1", one).written_bytes == 8 * RECORD.itemsize
    dup = recv.accept("n1", one)
    assert dup.duplicates == 1 and dup.written_bytes == 0
    # An overlap (re-sent from an older position): only its new bytes are appended.
    overlap = ps.encode(ps.Kind.PART, 0, 4 * RECORD.itemsize, raw[4 * RECORD.itemsize:])
    got = recv.accept("n1", overlap)
    assert got.written_bytes == 4 * RECORD.itemsize and got.errors == []
    assert (tmp_path / "run" / "trace-parts" / "rank0.bin").read_bytes() == raw


def test_out_of_order_and_late_frames_wait_for_their_gap(tmp_path: Path):
    rec = records([0, 1, 2, 3])
    raw, n = rec.tobytes(), RECORD.itemsize
    cuts = [0, 4 * n, 8 * n, 12 * n, 16 * n]
    frames = [ps.encode(ps.Kind.PART, 5, a, raw[a:b]) for a, b in zip(cuts, cuts[1:])]
    recv = ps.PartReceiver(tmp_path / "run")
    path = tmp_path / "run" / "trace-parts" / "rank5.bin"
    got = recv.accept("n2", frames[3] + frames[1])
    assert got.pending == 2 and got.written_bytes == 0 and not path.exists()
    got = recv.accept("n2", frames[2])
    assert got.pending == 1 and not path.exists()  # still ahead of the file
    got = recv.accept("n2", frames[0])  # the late first frame fills the gap: all go in
    assert got.written_bytes == len(raw) and recv.pending_bytes == 0
    assert path.read_bytes() == raw


def test_out_of_order_frames_are_bounded(tmp_path: Path):
    raw, n = records([0, 1, 2, 3]).tobytes(), RECORD.itemsize
    recv = ps.PartReceiver(tmp_path / "run", max_pending_bytes=5 * n)
    recv.accept("n2", ps.encode(ps.Kind.PART, 0, 4 * n, raw[4 * n:8 * n])
                + ps.encode(ps.Kind.PART, 0, 8 * n, raw[8 * n:]))
    # 12 records held over a 5-record bound: the farthest frame goes (re-sent later).
    assert recv.dropped_frames == 1 and recv.pending_bytes == 4 * n
    assert recv.positions() == {"part:0": 0}


@pytest.mark.parametrize("damage,message", [
    (lambda b: b"XXXX" + b[4:], "no frame at byte 0 of"),
    (lambda b: b[:4] + bytes([9]) + b[5:], "is version 9; this receiver reads 1"),
    (lambda b: b[:5] + bytes([7]) + b[6:], "has kind 7"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "checksum mismatch"),
    (lambda b: b[:-10], "truncated frame at byte 0"),
    (lambda b: b[:20], "less than a 28-byte header"),
])
def test_garbage_is_refused_naming_the_node(tmp_path: Path, damage, message):
    raw = records([0, 1]).tobytes()
    recv = ps.PartReceiver(tmp_path / "run")
    got = recv.accept("node-c", damage(ps.encode(ps.Kind.PART, 1, 0, raw)))
    assert len(got.errors) == 1 and got.errors[0].startswith("node node-c: ")
    assert message in got.errors[0], got.errors[0]
    assert not (tmp_path / "run" / "trace-parts" / "rank1.bin").exists()
    # The next good batch goes in: a refused batch stops nothing.
    assert recv.accept("node-c", ps.encode(ps.Kind.PART, 1, 0, raw)).written_bytes == len(raw)


def test_records_that_are_not_a_tracers_are_refused(tmp_path: Path):
    rec = records([0, 1])
    bad = rec.copy()
    bad["optype"][2] = 99
    recv = ps.PartReceiver(tmp_path / "run")
    good_other_rank = ps.encode(ps.Kind.PART, 0, 0, rec.tobytes())
    got = recv.accept("node-d", ps.encode(ps.Kind.PART, 2, 0, bad.tobytes()) + good_other_rank)
    assert "node node-d: trace-parts/rank2.bin (rank 2) at byte 0: op type code 99" in \
        got.errors[0]
    assert "the rest of its batch is refused" in got.errors[0]
    assert recv.positions() == {"part:2": 0}  # nothing written, not even the good frame after
    backwards = records([5], t0=300.0).tobytes() + records([1], t0=400.0).tobytes()
    got = recv.accept("node-d", ps.encode(ps.Kind.PART, 2, 0, backwards))
    assert "steps go backwards" in got.errors[0]
    half = ps.encode(ps.Kind.PART, 2, 0, rec.tobytes()[:RECORD.itemsize + 7])
    assert "not whole 46-byte records" in recv.accept("node-d", half).errors[0]
    status = recv.accept("node-d", ps.encode(ps.Kind.STATUS, 2, 1, b"[1, 2]"))
    assert "status/rank2.json: not a JSON object" in status.errors[0]


def test_a_truncated_batch_keeps_its_whole_frames(tmp_path: Path):
    raw, n = records([0, 1, 2]).tobytes(), RECORD.itemsize
    batch = ps.encode(ps.Kind.PART, 0, 0, raw[:4 * n]) + ps.encode(ps.Kind.PART, 0, 4 * n,
                                                                   raw[4 * n:])
    recv = ps.PartReceiver(tmp_path / "run")
    got = recv.accept("n1", batch[:-5])  # the connection dropped mid-frame
    assert got.written_bytes == 4 * n and "truncated frame" in got.errors[0]
    got = recv.accept("n1", batch)  # re-sent whole: the first frame is a duplicate
    assert got.duplicates == 1 and got.written_bytes == 8 * n
    assert (tmp_path / "run" / "trace-parts" / "rank0.bin").read_bytes() == raw


def test_a_restarted_receiver_resumes_from_disk(tmp_path: Path):
    rec = records([0, 1, 2])
    node = node_folder(tmp_path, 1, rec)
    run = tmp_path / "monitor" / "run"
    first = ps.PartReceiver(run)
    first.accept("node-b", ps.read_frames(node, [1], first.positions()))
    part = run / "trace-parts" / "rank1.bin"
    with open(part, "ab") as f:  # a writer killed mid-append leaves a torn record
        f.write(records([3], t0=500.0).tobytes()[:20])
    with open(run / "gc" / "rank1.jsonl", "ab") as f:
        f.write(b'{"start": 9')
    second = ps.PartReceiver(run)  # the monitor restarted
    assert second.positions() == {"part:1": rec.nbytes,
                                  "gc:1": len(b'{"start": 1.0, "duration_s": 0.01}\n')}
    assert part.stat().st_size == rec.nbytes  # the torn tail is cut
    more = records([3], t0=500.0)
    with open(node / "trace-parts" / "rank1.bin", "ab") as f:
        f.write(more.tobytes())
    got = second.accept("node-b", ps.read_frames(node, [1], second.positions()))
    assert got.errors == [] and got.duplicates == 0
    assert np.array_equal(read_records(part), np.concatenate([rec, more]))
    # A step older than what is on disk is still refused after the restart.
    old = ps.encode(ps.Kind.PART, 1, part.stat().st_size, records([0], t0=9.0).tobytes())
    assert "steps go backwards" in second.accept("node-b", old).errors[0]


def test_a_status_is_replaced_whole_and_never_by_an_older_one(tmp_path: Path):
    recv = ps.PartReceiver(tmp_path / "run")
    path = tmp_path / "run" / "status" / "rank4.json"
    recv.accept("n", ps.encode(ps.Kind.STATUS, 4, 200, b'{"step": 7}'))
    got = recv.accept("n", ps.encode(ps.Kind.STATUS, 4, 100, b'{"step": 6}'))
    assert got.duplicates == 1 and json.loads(path.read_text()) == {"step": 7}
    assert [p.name for p in path.parent.iterdir()] == ["rank4.json"]  # no temporary left


def test_a_shorter_status_reads_whole_and_the_folder_shows_it_landed(tmp_path: Path):
    from stragglerlab.monitor.news import status_mark
    from stragglerlab.run.run_folder import RunFolder

    run = tmp_path / "run"
    recv = ps.PartReceiver(run)
    recv.accept("n", ps.encode(ps.Kind.STATUS, 4, 100, b'{"step": 9, "loss": 0.123456}'))
    os.utime(run / "status", ns=(0, 0))  # an old folder mtime: the next batch must move it
    got = recv.accept("n", ps.encode(ps.Kind.STATUS, 4, 200, b'{"step": 10}'))
    assert got.statuses == 1 and got.errors == []
    assert status_mark(run) > 0  # the monitor's wait sees that statuses landed
    # Rewritten in place over a longer one: padded with JSON whitespace, read as the new.
    assert RunFolder(path=run).status() == {4: {"step": 10}}
    # A batch of parts only leaves the folder's mtime alone.
    os.utime(run / "status", ns=(0, 0))
    recv.accept("n", ps.encode(ps.Kind.PART, 4, 0, records([0]).tobytes()))
    assert status_mark(run) == 0
    # A round of several nodes' batches marks once, after the last.
    recv.accept("n", ps.encode(ps.Kind.STATUS, 4, 300, b'{"step": 11}'), mark=False)
    assert status_mark(run) == 0
    recv.mark_statuses()
    assert status_mark(run) > 0


def test_a_ranks_own_status_write_marks_its_folder(tmp_path: Path):
    from stragglerlab.monitor.news import status_mark
    from stragglerlab.run.run_folder import RunFolder, write_status

    run = tmp_path / "run"
    write_status(run / "status" / "rank0.json", b'{"step": 3, "started": 4, "loss": 1.25}')
    os.utime(run / "status", ns=(0, 0))
    write_status(run / "status" / "rank0.json", b'{"step": 4, "started": 5}')
    assert status_mark(run) > 0
    assert RunFolder(path=run).status() == {0: {"step": 4, "started": 5}}
    assert [p.name for p in (run / "status").iterdir()] == ["rank0.json"]  # no temporary


def test_a_status_caught_mid_write_on_the_node_is_sent_at_the_next_pull(tmp_path: Path):
    node = node_folder(tmp_path, 3, records([0]))
    status = node / "status" / "rank3.json"
    status.write_bytes(b'{"rank": 3, "st')  # torn: an in-place write under way
    recv, seen = ps.PartReceiver(tmp_path / "run"), {}
    got = recv.accept("node-b", ps.read_frames(node, [3], recv.positions(), status_seen=seen))
    assert got.errors == [] and got.statuses == 0  # the part went; the status waits
    status.write_bytes(b'{"rank": 3, "step": 0}')
    os.utime(status, ns=(10**18, 10**18))
    got = recv.accept("node-b", ps.read_frames(node, [3], recv.positions(), status_seen=seen))
    assert got.errors == [] and got.statuses == 1


def test_a_status_nested_past_the_parsers_depth_is_refused_not_raised(tmp_path: Path):
    got = ps.PartReceiver(tmp_path / "run").accept(
        "node-e", ps.encode(ps.Kind.STATUS, 1, 5, b"[" * 60000))
    assert got.errors and "node node-e: status/rank1.json: not a JSON object" in got.errors[0]


@pytest.mark.parametrize("thing", ["fifo", "symlink", "folder"])
def test_something_else_in_a_status_files_place_is_refused_not_waited_on(tmp_path: Path,
                                                                         thing: str):
    run = tmp_path / "run"
    (run / "status").mkdir(parents=True)
    path = run / "status" / "rank2.json"
    if thing == "fifo":
        os.mkfifo(path)  # opening it to write would wait for a reader forever
    elif thing == "symlink":
        (tmp_path / "elsewhere.json").write_text("{}")
        path.symlink_to(tmp_path / "elsewhere.json")
    else:
        path.mkdir()
    got = ps.PartReceiver(run).accept("node-c", ps.encode(ps.Kind.STATUS, 2, 1, b'{"step": 1}'))
    assert len(got.errors) == 1 and "node node-c: status/rank2.json" in got.errors[0]
    assert "remove what is there" in got.errors[0]
    if thing == "symlink":
        assert (tmp_path / "elsewhere.json").read_text() == "{}"  # not written through


def test_clock_corrections_are_applied_to_new_records(tmp_path: Path):
    """nodes.json's per-rank correction is subtracted from a rank's times as the monitor
    reads them, as the run-folder assembler subtracts run.json's at the end."""
    from stragglerlab.monitor.nodes import NodesView

    run = tmp_path / "run"
    run.mkdir()
    view = NodesView(run)
    assert view.refresh() is None and view.correction == {}
    (run / "nodes.json").write_text(json.dumps({
        "schema": "stragglerlab.nodes/1", "reference_node": "a",
        "nodes": {"a": {"ranks": [0, 1], "correction_s": 0.0, "lost": False},
                  "b": {"ranks": [2, 3], "correction_s": 0.25, "lost": False}}}))
    assert view.refresh() is None
    assert view.correction == {2: 0.25, 3: 0.25}
    rec = {0: records([0]), 2: records([0])}
    out = view.correct(rec)
    assert np.allclose(out[2]["start"], rec[2]["start"] - 0.25)
    assert np.array_equal(out[0], rec[0]) and out[2] is not rec[2]
    assert view.lost_ranks() == {}
    data = json.loads((run / "nodes.json").read_text())
    data["nodes"]["b"]["lost"] = True
    (run / "nodes.json").write_text(json.dumps(data))
    os.utime(run / "nodes.json", ns=(1, 1))  # a stale mtime must not hide the change
    assert view.refresh() is None and view.lost_ranks() == {"b": [2, 3]}
    (run / "nodes.json").write_text('{"nodes": {"b": {"ranks": "x"}}}')
    assert "nodes.json" in view.refresh() and view.lost_ranks() == {"b": [2, 3]}


@pytest.mark.parametrize("argv,message", [
    (["--run", "RUN", "--ray-run", "/x/run"], "--ray-run names a run on a Ray cluster"),
    (["--run", "RUN", "--ray-address", "10.0.0.1:6379", "--once"],
     "--ray-address streams a live run: drop --once"),
    (["--run", "RUN", "--ray-address", "nonsense"], "give HOST:PORT of the cluster's head"),
])
def test_monitor_ray_address_bad_input_is_one_clear_error(tmp_path: Path, capsys, argv,
                                                          message):
    from stragglerlab.cli import main

    argv = [a.replace("RUN", str(tmp_path / "run")) for a in argv]
    assert main(["monitor", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_monitor_refuses_to_attach_into_the_drivers_own_folder(tmp_path: Path, capsys):
    import socket

    from stragglerlab.cli import main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".driver-token").write_text("abc")
    with socket.socket() as s:  # a listening port: the address is reachable
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(["monitor", "--run", str(tmp_path / "run"), "--ray-address",
                     f"127.0.0.1:{port}"])
    assert code == 2
    assert "--run is the driver's own run folder" in capsys.readouterr().err
