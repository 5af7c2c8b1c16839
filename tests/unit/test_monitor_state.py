"""The monitor's published history (stragglerlab.monitor.state): kept as compact JSON, bounded
by lines and by bytes, read back as the page reads it."""

from __future__ import annotations

import json

from stragglerlab.monitor import state as st


def window(step: int, workers: int = 4) -> dict:
    return {"kind": "window", "step": step, "dp_size": 2, "pp_size": 2, "slowdown": 1.0,
            "worker_slowdown": [[1.0 + i / 1000 for i in range(workers)]], "note": None}


def test_lines_are_kept_as_json_and_read_back_as_the_page_reads_them():
    s = st.MonitorState("run")
    s.add(window(0))
    s.add({"kind": "error", "message": "boom"})
    s.add(dict(window(1), slowdown=float("nan")))  # strict JSON: NaN -> null, as on the page
    assert [x["seq"] for x in s.since()] == [0, 1, 2]
    assert s.since(after=1) == [json.loads(s.since_json(after=1)[0][1])]
    assert s.latest_window()["step"] == 1 and s.latest_window()["slowdown"] is None
    assert s.summary()["windows_analysed"] == 2 and s.summary()["errors"] == 1
    assert s.summary()["layout"] == [2, 2]


def test_the_history_is_bounded_by_lines_and_by_bytes(monkeypatch):
    monkeypatch.setattr(st, "MAX_KEPT_LINES", 5)
    s = st.MonitorState("run")
    for step in range(8):
        s.add(window(step))
    assert [x["step"] for x in s.since()] == [3, 4, 5, 6, 7] and s.version == 8
    assert [x["seq"] for x in s.since(after=5)] == [6, 7]  # seq stays the line's index
    one = len(s.since_json()[0][1])
    monkeypatch.setattr(st, "MAX_KEPT_BYTES", 2 * one + one // 2)
    s.add(window(8))
    assert [x["step"] for x in s.since()] == [7, 8] and s.kept_bytes <= st.MAX_KEPT_BYTES
    monkeypatch.setattr(st, "MAX_KEPT_BYTES", 10)  # a line larger than the budget: the
    s.add(window(9, workers=64))                   # latest is always kept
    assert [x["step"] for x in s.since()] == [9] and s.latest_window()["step"] == 9
