"""Perfetto / Chrome-trace timeline writer: events, pids/tids, units, gzip, step layout."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from stragglerlab.analysis.timeline import STREAMS, write_perfetto
from stragglerlab.util.errors import InputError

OPS = [  # (optype, start_s, duration_s, seq_id, mb_id) for one worker and one step
    ("params-all-gather", 0.000, 0.001, 0, -1),
    ("forward-recv", 0.001, 0.001, 0, -1),
    ("forward-compute", 0.002, 0.010, 0, 0),
    ("forward-send", 0.012, 0.001, 0, -1),
    ("backward-recv", 0.013, 0.001, 0, -1),
    ("backward-compute", 0.014, 0.020, 0, 0),
    ("backward-send", 0.034, 0.001, 0, -1),
    ("grads-reduce-scatter", 0.035, 0.002, 0, -1),
    ("gc", 0.037, 0.000, 0, -1),
    ("optimizer-clip-main-grad", 0.037, 0.001, 0, -1),
    ("optimizer", 0.038, 0.002, 0, -1),
]


def make_frame(dp=2, pp=2, steps=(0, 1), relative=True, step_len=0.040):
    rows = []
    for k, step in enumerate(steps):
        base = 0.0 if relative else 10.0 + k * 0.1
        for d in range(dp):
            for s in range(pp):
                for op, t, dur, seq, mb in OPS:
                    rows.append(
                        dict(
                            dp_rank=d,
                            stage=s,
                            rank=d * pp + s,
                            step=step,
                            optype=op,
                            start_ts=base + t,
                            duration=dur,
                            seq_id=seq,
                            mb_id=mb,
                        )
                    )
    return pd.DataFrame(rows)


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def x_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_events_pids_tids_and_units(tmp_path):
    frame = make_frame()
    out = tmp_path / "t.json"
    info = write_perfetto(frame, out, title="unit", step_gap=0.0)
    trace = load(out)
    xs = x_events(trace)
    assert len(xs) == len(frame) == info["events_written"]
    assert trace["otherData"]["title"] == "unit"
    assert trace["otherData"]["time_unit"] == "us"

    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    pnames = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert pnames == {0: "DP 0 / PP 0", 1: "DP 0 / PP 1", 2: "DP 1 / PP 0", 3: "DP 1 / PP 1"}
    tnames = {e["tid"]: (e["pid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    for e in xs:
        assert tnames[e["tid"]][0] == e["pid"]
    stream_of = {e["name"]: tnames[e["tid"]][1] for e in xs}
    assert stream_of == {
        "params-all-gather": "dp-comm",
        "grads-reduce-scatter": "dp-comm",
        "forward-compute": "compute",
        "backward-compute": "compute",
        "forward-send": "fwd-send",
        "forward-recv": "fwd-recv",
        "backward-send": "bwd-send",
        "backward-recv": "bwd-recv",
        "gc": "step-tail",
        "optimizer-clip-main-grad": "step-tail",
        "optimizer": "step-tail",
    }
    # One thread per stream per worker, tids unique across workers.
    assert len(tnames) == 4 * 7
    assert len({e["tid"] for e in xs}) == 4 * 7

    fwd = next(
        e for e in xs if e["name"] == "forward-compute" and e["pid"] == 3 and e["args"]["step"] == 0
    )
    assert fwd["ts"] == pytest.approx(2000.0)  # 0.002 s -> 2000 us
    assert fwd["dur"] == pytest.approx(10000.0)
    assert fwd["args"] == {"step": 0, "seq_id": 0, "mb_id": 0}
    assert fwd["cat"] == "forward-compute"


def test_gzip_when_gz_suffix(tmp_path):
    out = tmp_path / "t.json.gz"
    write_perfetto(make_frame(), out)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert len(x_events(load(out))) == len(make_frame())
    plain = tmp_path / "t.json"
    write_perfetto(make_frame(), plain)
    assert plain.read_bytes()[:1] == b"{"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.json.gz"]


def test_relative_steps_are_laid_back_to_back(tmp_path):
    out = tmp_path / "t.json"
    info = write_perfetto(make_frame(steps=(5, 7, 9)), out, step_gap=0.0)
    assert info["step_layout"] == "back-to-back"
    xs = x_events(load(out))
    by_step = {}
    for e in xs:
        lo, hi = by_step.get(e["args"]["step"], (float("inf"), 0.0))
        by_step[e["args"]["step"]] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    assert by_step[5][0] == pytest.approx(0.0)
    assert by_step[7][0] == pytest.approx(by_step[5][1])  # 40000 us
    assert by_step[9][0] == pytest.approx(by_step[7][1])
    assert by_step[9][1] == pytest.approx(3 * 40000.0)

    # Default step_gap leaves 10% of the previous step between steps (as the artifact).
    write_perfetto(make_frame(steps=(5, 7)), out)
    starts = sorted({e["ts"] for e in x_events(load(out)) if e["name"] == "params-all-gather"})
    assert starts == pytest.approx([0.0, 44000.0])


def test_absolute_clock_keeps_spacing(tmp_path):
    out = tmp_path / "t.json"
    info = write_perfetto(make_frame(relative=False), out)
    assert info["step_layout"] == "as-is"
    starts = sorted({e["ts"] for e in x_events(load(out)) if e["name"] == "params-all-gather"})
    assert starts == pytest.approx([0.0, 100000.0])  # shifted to 0, 0.1 s apart
    info = write_perfetto(make_frame(relative=False), out, layout="back-to-back", step_gap=0.0)
    starts = sorted({e["ts"] for e in x_events(load(out)) if e["name"] == "params-all-gather"})
    assert starts == pytest.approx([0.0, 40000.0])


def test_max_events_keeps_first_steps(tmp_path):
    frame = make_frame(steps=(3, 1, 2))  # step order, not row order, decides
    per_step = len(frame) // 3
    out = tmp_path / "t.json.gz"
    info = write_perfetto(frame, out, max_events=2 * per_step + 5)
    trace = load(out)
    xs = x_events(trace)
    assert len(xs) == 2 * per_step
    assert {e["args"]["step"] for e in xs} == {1, 2}
    assert info["truncated"] and trace["otherData"]["truncated"]
    assert "kept the first 2 of 3 steps" in trace["otherData"]["note"]
    # Smaller than one step: the earliest ops of the first step.
    write_perfetto(frame, out, max_events=5)
    xs = x_events(load(out))
    assert len(xs) == 5 and {e["args"]["step"] for e in xs} == {1}
    assert max(e["ts"] for e in xs) <= 2000.0
    assert not write_perfetto(frame, out)["truncated"]


def test_extras_unknown_optype_model_chunk_and_negative_duration(tmp_path):
    frame = make_frame(dp=1, pp=1, steps=(0,))
    frame["mc"] = 0
    frame.loc[0, "optype"] = "mystery-op"
    frame.loc[1, "duration"] = -1e-6
    frame["optype"] = frame["optype"].astype("category")
    out = tmp_path / "t.json"
    write_perfetto(frame, out)
    trace = load(out)
    xs = x_events(trace)
    odd = next(e for e in xs if e["name"] == "mystery-op")
    assert odd["tid"] == STREAMS.index("other")
    assert all(e["args"]["model_chunk"] == 0 for e in xs)
    assert min(e["dur"] for e in xs) == 0.0


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="seq_id"):
        write_perfetto(make_frame().drop(columns=["seq_id"]), tmp_path / "t.json")
    with pytest.raises(InputError, match="no rows"):
        write_perfetto(make_frame().iloc[:0], tmp_path / "t.json")
    frame = make_frame()
    frame.loc[3, "start_ts"] = float("nan")
    with pytest.raises(InputError, match=r"rows \[3\]"):
        write_perfetto(frame, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def flow_pairs(trace):
    """{id: {'s': event, 'f': event}} of the flow arrows."""
    flows = {}
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    return flows


def test_p2p_flows_join_each_send_to_its_recv(tmp_path):
    frame = make_frame(dp=2, pp=3, steps=(0, 1))
    out = tmp_path / "t.json"
    info = write_perfetto(frame, out, step_gap=0.0)
    trace = load(out)
    flows = flow_pairs(trace)
    # Per DP rank and step: forward 0->1, 1->2 and backward 1->0, 2->1.
    assert info["flows"] == len(flows) == 2 * 2 * 4
    by_key = {(e["pid"], e["tid"], e["ts"]): e for e in x_events(trace)}
    for f in flows.values():
        assert set(f) == {"s", "f"} and f["f"]["bp"] == "e"
        assert f["s"]["name"] == f["f"]["name"] and f["s"]["cat"] == "p2p"
        send = [e for k, e in by_key.items() if k[:2] == (f["s"]["pid"], f["s"]["tid"])
                and e["ts"] <= f["s"]["ts"] <= e["ts"] + e["dur"]]
        recv = [e for k, e in by_key.items() if k[:2] == (f["f"]["pid"], f["f"]["tid"])
                and e["ts"] <= f["f"]["ts"] <= e["ts"] + e["dur"]]
        assert len(send) == len(recv) == 1
        direction = f["s"]["name"].split()[0]
        assert send[0]["name"] == f"{direction}-send" and recv[0]["name"] == f"{direction}-recv"
        assert send[0]["args"]["step"] == recv[0]["args"]["step"]
        assert f["f"]["pid"] == f["s"]["pid"] + (1 if direction == "forward" else -1)
    assert write_perfetto(frame, out, flows=False)["flows"] == 0
    assert flow_pairs(load(out)) == {}


def test_ideal_copies_and_counter_fit_max_events(tmp_path):
    frame = make_frame(dp=1, pp=2, steps=(0, 1, 2))
    ideal = make_frame(dp=1, pp=2, steps=(0,)).assign(duration=lambda d: d["duration"] / 2)
    per_step = len(frame) // 3
    out = tmp_path / "t.json"
    info = write_perfetto(frame, out, ideal=ideal, step_slowdown={0: 1.5, 1: 1.25, "2": 1.0},
                          max_events=4 * per_step + 3, step_gap=0.0)
    trace = load(out)
    xs = x_events(trace)
    assert len(xs) == 4 * per_step  # two whole steps, each with its ideal copy
    assert info["truncated"] and info["steps_written"] == 2 and info["ideal"]["copies"] == 2
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "traced DP 0 / PP 0", 1: "traced DP 0 / PP 1",
                     2: "ideal DP 0 / PP 0", 3: "ideal DP 0 / PP 1",
                     4: "per-step slowdown S"}
    ideal_x = [e for e in xs if e["pid"] >= 2]
    assert {e["args"]["step"] for e in ideal_x} == {0, 1}
    step1 = min(e["ts"] for e in xs if e["pid"] < 2 and e["args"]["step"] == 1)
    assert min(e["ts"] for e in ideal_x if e["args"]["step"] == 1) == pytest.approx(step1)
    counter = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert [(e["ts"], e["args"]["S"]) for e in counter] == [
        (0.0, 1.5), (pytest.approx(step1), 1.25), (pytest.approx(2 * 40000.0), 1.25)]
    assert info["flows"] == 2 * 2 * 2  # 2 steps x (traced, ideal) x (forward, backward)
    with pytest.raises(ValueError, match="one simulated step"):
        write_perfetto(frame, out, ideal=frame)
    with pytest.raises(InputError, match="ideal frame"):
        write_perfetto(frame, out, ideal=ideal.iloc[:0])
