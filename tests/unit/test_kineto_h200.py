"""Real torch.profiler traces from an H200 (tests/data/kineto-h200): one rank's host-device
replay reproduces every step within 5 % and names the kind of step, and the vocabulary
import's GPU timing holds a backward pass whose kernels autograd's thread launched."""

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
