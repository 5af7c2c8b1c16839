"""The monitor on a cluster run: nodes.json's clock corrections applied live, a lost node
shown with its ranks (history, summary, /metrics) and the windows going on without it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.metrics import metrics_text
from stragglerlab.trace.trace_parts import RECORD
from tests.unit.monitor_helpers import make_feeder, make_monitor, named


@pytest.fixture(scope="module")
def dp3_src(tmp_path_factory) -> Path:
    """DP 3 x PP 2, 12 steps, DP 2 / stage 1 twice as slow from step 3 on."""
    out = tmp_path_factory.mktemp("src") / "dp3"
    assert main(["synth", "--out", str(out), "--dp", "3", "--pp", "2", "--steps", "12",
                 "--slow", "2,1,2.0,3", "--quiet"]) == 0
    return out


def nodes_json(run: Path, lost: bool = False, shift: float = 0.0) -> None:
    """Node a holds pipeline DP 0 (ranks 0, 3), node b the other two."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "nodes.json").write_text(json.dumps({
        "schema": "stragglerlab.nodes/1", "reference_node": "b",
        "nodes": {"a": {"ranks": [0, 3], "correction_s": shift, "lost": lost},
                  "b": {"ranks": [1, 2, 4, 5], "correction_s": 0.0, "lost": False}}}))


def test_a_nodes_clock_offset_is_undone_as_records_are_read(tmp_path: Path, dp3_src: Path):
    """Node a's ranks write their times 40 s ahead; nodes.json says so: the windows are
    those of the job on one clock (the same findings as the run without the offset)."""
    plain, shifted = tmp_path / "plain", tmp_path / "shifted"
    f_plain, f_shift = make_feeder(dp3_src, plain), make_feeder(dp3_src, shifted)
    nodes_json(shifted, shift=40.0)
    m_plain, m_shift = make_monitor(plain), make_monitor(shifted)
    for step in f_plain.steps:
        f_plain.write_step(step)
        f_shift.write_step(step, [1, 2, 4, 5])
        for r in (0, 3):  # node a's clock runs 40 s ahead of node b's
            path = f_shift.part_path(r)
            before = path.stat().st_size if path.exists() else 0
            f_shift.write_step(step, [r])
            raw = np.frombuffer(path.read_bytes()[before:], dtype=RECORD).copy()
            raw["start"] += 40.0
            raw["end"] += 40.0
            with open(path, "r+b") as f:
                f.seek(before)
                f.write(raw.tobytes())
        a, b = m_plain.poll(), m_shift.poll()
        assert [w["step"] for w in a] == [w["step"] for w in b]
        for wa, wb in zip(a, b):
            assert named(wa) == named(wb)
            assert wb["slowdown"] == pytest.approx(wa["slowdown"], rel=1e-6)
    assert ("slow-worker", 2, 1) in named(b[-1])


def test_a_lost_node_is_shown_and_the_windows_go_on_without_it(tmp_path: Path, dp3_src: Path):
    run = tmp_path / "run"
    feeder = make_feeder(dp3_src, run)
    nodes_json(run)
    mon = make_monitor(run)
    for step in feeder.steps[:6]:
        feeder.write_step(step)
        mon.poll()
    assert mon.state.summary()["lost_ranks"] == []
    nodes_json(run, lost=True)  # node a (DP 0's pipeline) is gone; the others go on
    out = []
    for step in feeder.steps[6:]:
        feeder.write_step(step, [1, 2, 4, 5])
        out += mon.poll()
    assert [w["step"] for w in out] == feeder.steps[6:]
    last = out[-1]
    assert last["lost_ranks"] == [0, 3] and "ranks [0, 3] lost" in last["note"]
    assert last["dp_size"] == 3 and [row[0] for row in last["worker_slowdown"]] == [None, None]
    assert ("slow-worker", 2, 1) in named(last)  # named by the job's own DP rank
    assert all(r["rank"] == 5 for f in last["findings"] for r in f["ranks"]
               if (r["dp_rank"], r["stage"]) == (2, 1))
    summary = mon.state.summary()
    assert summary["lost_ranks"] == [0, 3]
    errors = [x["message"] for x in mon.state.since() if x["kind"] == "error"]
    assert errors == ["node a lost with ranks [0, 3]: the windows go on with the 4 ranks "
                      "that remain (DP ranks [1, 2])"]
    text = metrics_text(mon.state.latest_window(), summary["windows_analysed"],
                        summary["errors"], summary["nodes"])
    assert 'stragglerlab_node_lost{node="a"} 1' in text
    assert 'stragglerlab_node_lost{node="b"} 0' in text
    assert "stragglerlab_ranks_lost 2" in text


def test_a_lost_node_holding_part_of_a_pipeline_stops_the_windows_saying_why(
        tmp_path: Path, dp3_src: Path):
    run = tmp_path / "run"
    feeder = make_feeder(dp3_src, run)
    mon = make_monitor(run)
    for step in feeder.steps[:4]:
        feeder.write_step(step)
        mon.poll()
    (run / "nodes.json").write_text(json.dumps({"nodes": {
        "a": {"ranks": [0, 1, 2], "lost": True}, "b": {"ranks": [3, 4, 5]}}}))
    feeder.write_step(feeder.steps[4], [3, 4, 5])
    assert mon.poll() == []
    errors = [x["message"] for x in mon.state.since() if x["kind"] == "error"]
    assert len(errors) == 1 and "the windows stop: the what-if needs whole pipelines" in \
        errors[0]
