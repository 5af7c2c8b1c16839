"""The what-if's replays split by steps give whatif.json bit for bit (analysis/replays.py).

The split is what `stragglerlab whatif --ray-address` does over Ray actors
(stragglerlab/whatif_ray.py); here the parts are replayed in this process, so the
merge is checked on every trace without starting Ray (tests/e2e/test_whatif_ray.py
runs the same on a simulated Ray cluster). The CLI's flag mistakes are refused
before the trace is read, and before any Ray starts.

    .venv/bin/python -m pytest -q tests/unit/test_whatif_replays.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from stragglerlab.analysis.replays import ChunkedReplays, Replays, ThreadReplays, step_parts
from stragglerlab.analysis.whatif import ComputeIdeal, run_whatif
from stragglerlab.cli import main
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace
from tests.unit.refdata import DIFFERENTIAL, reference


def in_process_parts(n_parts: int, seen: list):
    """A replays factory like whatif_ray's: one Replays per step part, merged in order."""

    def factory(graph, value):
        parts = step_parts(value.shape[1], n_parts)
        seen.append([p.stop - p.start for p in parts])
        reps = [Replays(graph, np.ascontiguousarray(value[:, p])) for p in parts]
        return ChunkedReplays(lambda method, args: [getattr(r, method)(*a)
                                                    for r, a in zip(reps, args, strict=True)],
                              parts)

    return factory


def document(df, meta, where, replays=Replays) -> str:
    """whatif.json's document as the verb computes it (every compute ideal), as text:
    floats printed with repr, so equal text is equal bits."""
    run = run_whatif(df, meta, where, compute_ideal=ComputeIdeal.MEAN,
                     other_ideals=list(ComputeIdeal), replays=replays)
    return json.dumps(run.result.to_json(), sort_keys=True)


def traces():
    yield "reference AR", *read_trace(reference("trace-AR.parquet"), reference("meta-AR.yaml"))
    yield "reference ST", *read_trace(reference("trace-ST.parquet"), reference("meta-ST.yaml"))
    for case in ("gc-pauses", "delay-pp4-last"):
        yield f"differential {case}", *read_trace(DIFFERENTIAL / case / "trace.parquet")
    cfg = SyntheticConfig(dp_size=4, pp_size=2, n_steps=9,
                          slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=1.5,
                                                   first_step=3),))
    yield "synth dp4 pp2, a slow worker from step 3", *synthesize_trace(cfg)


@pytest.mark.parametrize("name,df,meta", list(traces()), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_split_replays_give_the_same_document_bit_for_bit(name, df, meta):
    one = document(df, meta, name)
    if name.startswith("differential"):  # testbed traces: the launch attribution is split too
        assert json.loads(one)["launch_slowdown_by_optype"], name
    n_steps = df["step"].nunique()
    # 3 and 7 split unevenly; past 12 steps one step a part costs a replay per step.
    for n_parts in (3, 7) if n_steps > 12 else (2, 3, n_steps + 4):  # last: capped at 1 a part
        seen: list = []
        split = document(df, meta, name, in_process_parts(n_parts, seen))
        assert seen and sum(seen[0]) == n_steps and len(seen[0]) == min(n_parts, n_steps)
        assert split == one, f"{name}: {n_parts} parts differ from one process"


@pytest.mark.parametrize("name,df,meta", [t for t in traces() if t[0] in (
    "reference ST", "differential gc-pauses", "synth dp4 pp2, a slow worker from step 3")],
    ids=lambda v: v if isinstance(v, str) else "")
def test_threads_give_the_same_document_bit_for_bit(name, df, meta):
    """`whatif --threads N`: the step parts replayed on threads of this process, each
    part's replays running at once, merge into the one-thread document."""
    one = document(df, meta, name)
    for threads in (2, 3):
        with ThreadReplays(threads) as replays:
            assert document(df, meta, name, replays) == one, f"{name}: {threads} threads"


def test_thread_replays_refuse_zero_threads_and_stop_their_threads():
    with pytest.raises(ValueError, match="at least 1"):
        ThreadReplays(0)
    with ThreadReplays(2) as replays:
        pool = replays._pool
        assert pool is not None
    assert replays._pool is None and pool._shutdown


def test_step_parts_cover_the_steps_in_order():
    assert step_parts(8, 3) == [slice(0, 2), slice(2, 5), slice(5, 8)]
    assert step_parts(2, 5) == [slice(0, 1), slice(1, 2)]
    assert step_parts(7, 1) == [slice(0, 7)]
    with pytest.raises(ValueError):
        step_parts(0, 2)


@pytest.mark.parametrize("flags,words", [
    (["--ray-workers", "2"], "--ray-workers needs --ray-address"),
    (["--ray-address", "local", "--ray-workers", "0"], "give at least 1"),
    (["--ray-address", "head-without-port"], "HOST:PORT"),
    (["--ray-address", "127.0.0.1:1"], "cannot reach the Ray cluster"),
    (["--threads", "0"], "--threads 0: give at least 1"),
])
def test_ray_flag_mistakes_are_one_clear_error(tmp_path, capsys, flags, words):
    code = main(["whatif", "--trace", str(reference("trace-ST.parquet")), "--meta",
                 str(reference("meta-ST.yaml")), "--out", str(tmp_path / "out"), "--quiet",
                 *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
