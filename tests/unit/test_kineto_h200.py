"""Real torch.profiler traces from an H200 (tests/data/kineto-h200): one rank's host-device
replay reproduces every step within 5 % and names the kind of step, the vocabulary
import's GPU timing holds a backward pass whose kernels autograd's thread launched, and
`--timing auto` takes the timing whose replay reproduces the trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stragglerlab.analysis.host_device import (
    DEVICE_BOUND,
    LAUNCH_BOUND,
    MAX_DISCREPANCY,
    simulate_steps,
)
from stragglerlab.importers.host_device_events import read_host_device
from stragglerlab.importers.kineto import import_kineto
from stragglerlab.importers.kineto_events import read_rank
from stragglerlab.importers.vocab_ranges import foreign_gpu_spans, outermost

H200 = Path(__file__).resolve().parents[1] / "data" / "kineto-h200"
KINDS = {"launch-bound": LAUNCH_BOUND, "multi-stream": DEVICE_BOUND,
         "cuda-graph": DEVICE_BOUND, "engine-dp1-pp1": DEVICE_BOUND}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_h200_steps_reproduced_and_classified(kind):
    rep = simulate_steps(read_host_device(H200 / f"{kind}-rank0.json.gz"))
    assert rep.steps
    worst = max(abs(s.discrepancy) for s in rep.steps)
    assert worst <= MAX_DISCREPANCY, [(s.step, round(s.discrepancy, 4)) for s in rep.steps]
    assert rep.classification == KINDS[kind]


def _durations(timing: str) -> dict[str, float]:
    res = import_kineto([H200 / "engine-dp1-pp1-rank0.json.gz"], timing=timing)
    df = res.df.assign(d=res.df["duration"])
    return df.groupby("optype")["d"].sum().to_dict()


def test_gpu_timing_holds_the_backward_pass_autograd_launched():
    """Kineto's gpu_user_annotation of `backward-compute` covers the main thread's launches
    only (about 1 us here); the kernels autograd's device thread launched inside the range
    make the GPU span. GPU and CPU timing then agree within 5 % on a job that synchronizes
    after every op."""
    cpu, gpu = _durations("cpu"), _durations("gpu")
    assert cpu["backward-compute"] > 0.01  # tens of ms of backward in the kept step
    assert gpu["backward-compute"] == pytest.approx(cpu["backward-compute"], rel=0.05)
    assert gpu["forward-compute"] == pytest.approx(cpu["forward-compute"], rel=0.05)


def test_foreign_launches_are_what_kineto_left_out():
    """The spans foreign_gpu_spans adds are the backward ranges', from launches on threads
    other than the step's, and each holds more GPU time than Kineto's own span for it."""
    ev = read_rank(H200 / "engine-dp1-pp1-rank0.json.gz", vocabulary=True)
    v = ev.vocab
    ops = outermost(v.ranges)
    spans = foreign_gpu_spans(ops, v.step_tid, v.launches, v.gpu_ops)
    assert {ops[i][0] for i in spans} == {"backward-compute"}
    for i, (a, b) in spans.items():
        kineto = v.gpu_spans.get(ops[i][4], (a, a))
        assert b - a > 100 * (kineto[1] - kineto[0])


def test_no_foreign_launch_changes_nothing(tmp_path):
    """A trace whose launches all run on the step's thread keeps Kineto's spans: the
    foreign spans are empty."""
    doc = json.loads(gzip.open(H200 / "engine-dp1-pp1-rank0.json.gz").read())
    step_tid = next(e["tid"] for e in doc["traceEvents"]
                    if str(e.get("name", "")).startswith("ProfilerStep#"))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["tid"] = step_tid
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    v = read_rank(p, vocabulary=True).vocab
    assert foreign_gpu_spans(outermost(v.ranges), v.step_tid, v.launches, v.gpu_ops) == {}


ENGINE = H200 / "engine-dp1-pp1-rank0.json.gz"


def _answers(*values):
    """A reproduction that answers `values` in turn and keeps each trace it is given."""
    seen = []

    def reproduction(df, meta):
        seen.append(df)
        return values[len(seen) - 1]
    return reproduction, seen


def test_auto_timing_keeps_gpu_where_it_reproduces():
    rep, seen = _answers(0.01)
    res = import_kineto([ENGINE], reproduction=rep)
    assert len(seen) == 1 and res.report["timing"] == "gpu"
    assert res.report["timing_evidence"] == {"tried": ["gpu"], "gpu": 0.01, "cpu": None,
                                             "max_discrepancy": 0.05, "chosen": "gpu"}


def test_auto_timing_takes_cpu_where_only_it_reproduces():
    rep, seen = _answers(-0.16, 0.04)
    res = import_kineto([ENGINE], reproduction=rep)
    assert len(seen) == 2 and res.report["timing"] == "cpu"
    assert res.report["timing_evidence"]["chosen"] == "cpu"
    assert res.df.equals(seen[1])  # the trace kept is the one that reproduced
    cpu = import_kineto([ENGINE], timing="cpu")
    assert res.df.equals(cpu.df)


def test_auto_timing_keeps_gpu_where_neither_reproduces():
    rep, seen = _answers(float("inf"), 0.06)  # inf: the what-if refused the GPU-timed trace
    res = import_kineto([ENGINE], reproduction=rep)
    assert res.report["timing"] == "gpu"
    ev = res.report["timing_evidence"]
    assert ev["tried"] == ["gpu", "cpu"] and ev["gpu"] is None and ev["cpu"] == 0.06
    assert ev["chosen"] == "gpu"


def test_a_timing_asked_for_is_not_second_guessed():
    rep, seen = _answers()
    for timing in ("gpu", "cpu"):
        res = import_kineto([ENGINE], timing=timing, reproduction=rep)
        assert res.report["timing"] == timing and "timing_evidence" not in res.report
    assert not seen


def test_import_says_which_timing_it_took(tmp_path, monkeypatch, capsys):
    """The CLI's reproduction is the what-if's discrepancy; where GPU timing misses and CPU
    timing reproduces, the summary says so and import.json records both."""
    import stragglerlab.analysis.whatif as whatif
    from stragglerlab.cli import main

    answers = iter([-0.1582, 0.0419])
    monkeypatch.setattr(whatif, "simulation_discrepancy", lambda df, meta, where: next(answers))
    assert main(["import", "kineto", "--quiet", "--traces", str(ENGINE),
                 "--out", str(tmp_path / "imp")]) == 0
    out = capsys.readouterr().out
    assert "timing cpu" in out and "-15.82%" in out and "+4.19%" in out
    ev = json.loads((tmp_path / "imp" / "import.json").read_text())["timing_evidence"]
    assert ev["chosen"] == "cpu" and ev["gpu"] == -0.1582


def test_simulation_discrepancy_is_the_whatifs():
    from stragglerlab.analysis.whatif import run_whatif, simulation_discrepancy
    from stragglerlab.trace.trace_io import read_trace
    from tests.unit.refdata import REFERENCE

    df, meta = read_trace(str(REFERENCE / "trace-ST.parquet"), str(REFERENCE / "meta-ST.yaml"))
    full = run_whatif(df, meta, where="trace-ST").result.simulation_discrepancy
    assert simulation_discrepancy(df, meta, "trace-ST") == full - 1.0
