"""Events dropped from the bytes before parsing (importers/event_filter) are exactly ones
read_rank's loop would have discarded; everything it keeps still arrives."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from stragglerlab.importers import stream_json
from stragglerlab.importers.kineto_events import KEPT_CPU_PREFIXES, SKIP, read_rank
from stragglerlab.importers.stream_json import TraceReader

# Raw event texts: odd spacing, key orders, nested and quoted look-alikes, escapes.
EVENTS = [
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1, "args": {"a": [1]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 2, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms_x", "ts": 3, "dur": 1}',
    '{"ph": "X", "name": "nccl:all_reduce", "cat": "cpu_op", "ts": 4, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 1, "args": {"cat": "cpu_op",'
    ' "ph": "s"}}',
    '{"ph": "X", "cat": "user_annotation", "name": "a \\"cat\\": \\"cpu_op\\" b", "ts": 6,'
    ' "dur": 1}',
    '{"ph": "s", "id": 3, "cat": "ac2g", "name": "ac2g", "ts": 7}',
    '{"ph": "X", "cat": "cpu_op", "name": "\\u0050rofilerStep#3", "ts": 8, "dur": 1}',
    '{"cat":"cpu_op","ph":"X","name":"aten::add","ts":9,"dur":1}',
    '{"ph" : "X" , "cat" : "cpu_op" , "name" : "ProfilerStep#1" , "ts" : 10, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "x\\\\", "ts": 11, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "ts": 12, "dur": 1}',
    '{"ph": "X", "name": "gloo:broadcast", "ts": 13, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 14, "dur": 1}',
    '{"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "ts": 15}',
    '{"ph": "Xy", "cat": "kernel", "name": "k", "ts": 16, "dur": 1}',
    '{"ph": "M", "name": "thread_name", "args": {"name": "ProfilerStep#"}}',
    "7",
    '{"ph": "X", "cat": "cpu_op", "name": "aten::t", "ts": 17, "dur": 1, "args": '
    '{"Input Dims": [[1, 2], []], "s": "]}{[\\""}}',
    '{"ph": "X", "cat": "cpu_op", "name": "Prof\\u0069lerStep#2", "ts": 18, "dur": 1}',
]


def _loop_keeps(e) -> bool:
    """What read_rank's loop does not discard at its first checks."""
    if type(e) is not dict or e.get("ph") != "X":
        return False
    name = e.get("name")
    return type(name) is str and not (e.get("cat") == "cpu_op" and name != "record_param_comms"
                                      and not name.startswith(KEPT_CPU_PREFIXES))


def _write(tmp_path, repeat=30):
    text = '{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [\n' + \
        ",\n".join(EVENTS * repeat) + '\n], "baseTimeNanoseconds": 0}'
    json.loads(text)  # the fixture is valid JSON
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip.compress(text.encode()))
    return f, json.loads(text)["traceEvents"]


@pytest.mark.parametrize("batch,read", [(64, 7), (1 << 20, 1 << 20), (300, 1000)])
def test_skip_drops_only_what_the_loop_discards(tmp_path, monkeypatch, batch, read):
    f, events = _write(tmp_path)
    monkeypatch.setattr(stream_json, "BATCH_BYTES", batch)
    monkeypatch.setattr(stream_json, "READ_BYTES", read)
    r = TraceReader(path=f, skip=SKIP)
    got = [e for b in r.batches() for e in b]
    assert [e for e in got if _loop_keeps(e)] == [e for e in events if _loop_keeps(e)]
    assert len(got) < len(events)  # something was dropped unparsed
    kept = {json.dumps(e) for e in got}
    for i in (0, 2, 6, 8, 11, 14, 15, 16, 18):  # positively identified: never parsed
        assert json.dumps(json.loads(EVENTS[i])) not in kept
    for i in (1, 3, 4, 5, 7, 9, 10, 12, 13, 19):  # kept names, look-alikes, escapes
        assert json.dumps(json.loads(EVENTS[i])) in kept
    assert r.events == sum(1 for e in events if isinstance(e, dict))


def test_read_rank_same_with_and_without_skip(tmp_path, monkeypatch):
    from stragglerlab.importers import kineto_events

    f, _ = _write(tmp_path)
    a = read_rank(f)
    monkeypatch.setattr(kineto_events, "SKIP", None)
    b = read_rank(f)
    assert (a.steps, a.labels, a.cpu_comms, a.nccl) == (b.steps, b.labels, b.cpu_comms, b.nccl)
    # NaN: a kernel whose launch is not in the file (np.array_equal tells NaN from NaN)
    assert np.array_equal(a.kernels, b.kernels, equal_nan=True)
    assert a.launches.tolist() == b.launches.tolist()
    assert a.activity.tolist() == b.activity.tolist()
