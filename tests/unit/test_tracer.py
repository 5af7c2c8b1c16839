"""Per-rank binary tracer: seq_ids, timing, async completion, durability, torn records."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_parts import RECORD, read_records
from stragglerlab.workloads.tracer import Tracer

F, B, OPT = OpType.FORWARD_COMPUTE, OpType.BACKWARD_COMPUTE, OpType.OPTIMIZER


def code(t: OpType) -> int:
    return OPTYPE_VALUES.index(t.value)


def test_seq_id_per_optype_restarts_each_step(tmp_path: Path):
    path = tmp_path / "parts" / "rank0.bin"  # parent created
    tr = Tracer(path)
    for step in (5, 6):
        tr.begin_step(step)
        for t in (F, F, B, F, B, OPT):
            tr.record(t, 1.0, 2.0)
        tr.end_step()
    tr.close()
    rec = read_records(path)
    assert len(rec) == 12
    assert list(rec["step"]) == [5] * 6 + [6] * 6
    assert list(rec["seq_id"]) == [0, 1, 0, 2, 1, 0] * 2
    assert list(rec["optype"][:6]) == [code(t) for t in (F, F, B, F, B, OPT)]


def test_record_fields_round_trip(tmp_path: Path):
    tr = Tracer(tmp_path / "r.bin")
    tr.begin_step(3)
    row = tr.record(F, 10.5, 11.25, mb_id=2, mc=0, gmc=1, seq_len_sq_sum=4096.0)
    assert row == 0
    assert tr.record(OPT, 12.0, 12.5) == 1
    tr.end_step()
    tr.close()
    r = read_records(tmp_path / "r.bin")
    assert r.dtype == RECORD
    assert tuple(r[0]) == (3, code(F), 0, 2, 0, 1, 10.5, 11.25, 4096.0)
    assert (r[1]["mb_id"], r[1]["mc"], r[1]["gmc"]) == (-1, -1, -1)
    assert math.isnan(r[1]["seq_len_sq_sum"])


def test_op_context_times_body(tmp_path: Path):
    tr = Tracer(tmp_path / "r.bin")
    tr.begin_step(0)
    t_before = time.monotonic()
    with tr.op(F, mb_id=1, mc=0, gmc=0, seq_len_sq_sum=9.0):
        time.sleep(0.01)
    with tr.op(B, mb_id=1):
        pass
    t_after = time.monotonic()
    tr.close()  # close flushes the pending step
    r = read_records(tmp_path / "r.bin")
    assert len(r) == 2
    assert (r["start"] <= r["end"]).all()
    assert t_before <= r["start"].min() and r["end"].max() <= t_after
    assert r[0]["end"] - r[0]["start"] >= 0.009
    assert r[0]["mb_id"] == 1 and r[0]["seq_len_sq_sum"] == 9.0
    assert r[0]["end"] <= r[1]["start"]


def test_set_end_completes_async_row(tmp_path: Path):
    tr = Tracer(tmp_path / "r.bin")
    tr.begin_step(1)
    tr.record(F, 0.0, 1.0)
    row = tr.record(OpType.FORWARD_SEND, 1.0, float("nan"))
    tr.record(B, 2.0, 3.0)
    tr.set_end(row, 1.75)
    tr.set_end(-1, 99.0)  # a disabled tracer's row: ignored
    tr.end_step()
    tr.close()
    r = read_records(tmp_path / "r.bin")
    assert list(r["end"]) == [1.0, 1.75, 3.0]
    assert not np.isnan(r["end"]).any()


def test_end_step_appends_and_is_durable(tmp_path: Path):
    path = tmp_path / "r.bin"
    tr = Tracer(path)
    tr.begin_step(0)
    tr.record(F, 0.0, 1.0)
    assert path.stat().st_size == 0  # buffered until the step ends
    tr.end_step()
    assert path.stat().st_size == RECORD.itemsize
    assert len(read_records(path)) == 1  # readable while the tracer is still open
    tr.end_step()  # nothing pending: no write
    assert path.stat().st_size == RECORD.itemsize
    tr.begin_step(1)
    tr.record(F, 2.0, 3.0)
    tr.record(OPT, 3.0, 4.0)
    tr.end_step()
    r = read_records(path)
    assert list(r["step"]) == [0, 1, 1]
    tr.close()
    tr.close()  # idempotent


def test_torn_trailing_record_dropped(tmp_path: Path):
    path = tmp_path / "r.bin"
    tr = Tracer(path)
    for step in range(3):
        tr.begin_step(step)
        tr.record(F, step, step + 0.5)
        tr.record(OPT, step + 0.5, step + 1.0)
        tr.end_step()
    tr.close()
    full = path.read_bytes()
    assert len(full) == 6 * RECORD.itemsize
    path.write_bytes(full[:-5])
    r = read_records(path)
    assert len(r) == 5
    assert list(r["step"]) == [0, 0, 1, 1, 2]
    assert list(r["start"]) == [0.0, 0.5, 1.0, 1.5, 2.0]
    path.write_bytes(full[: RECORD.itemsize - 1])
    assert len(read_records(path)) == 0
    path.write_bytes(b"")
    assert len(read_records(path)) == 0


def test_disabled_tracer_writes_nothing(tmp_path: Path):
    path = tmp_path / "sub" / "r.bin"
    tr = Tracer(path, enabled=False)
    tr.begin_step(0)
    assert tr.record(F, 0.0, 1.0) == -1
    with tr.op(B):
        pass
    tr.set_end(-1, 2.0)
    tr.end_step()
    tr.close()
    assert not path.exists() and not path.parent.exists()



def test_an_async_op_that_never_ended_is_not_written(tmp_path: Path):
    """A run that fails mid-step (a lost peer) closes its tracer with an async op still
    open: that row has no end, and a record whose end is not a clock reading is refused by
    every reader (check_records), so it is left out and the step's other rows are kept."""
    from stragglerlab.trace.trace_parts import check_records

    path = tmp_path / "rank2.bin"
    tr = Tracer(path)
    tr.begin_step(4)
    tr.record(F, 1.0, 2.0)
    tr.record(OpType.FORWARD_SEND, 2.0, math.nan)  # posted; its peer never answered
    done = tr.record(OpType.BACKWARD_RECV, 2.5, math.nan)
    tr.set_end(done, 3.0)
    tr.close()
    rec = read_records(path)
    assert [int(o) for o in rec["optype"]] == [code(F), code(OpType.BACKWARD_RECV)]
    assert check_records(rec, -1) is None
