"""Run folder assembly from raw per-rank tracer files, including a killed run's torn tail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import COLUMN_NAMES, OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.workloads.run_folder import assemble_trace, job_meta, read_run, write_run_folder
from stragglerlab.workloads.tracer import Tracer

STEPS, WARMUP, DP, PP = 4, 1, 2, 2
CLOCK0 = 5000.0  # a monotonic-clock origin far from 0: start_ts must be made relative
OPS = [  # per rank and step: (optype, mb_id, mc)
    (OpType.FORWARD_COMPUTE, 0, 0), (OpType.FORWARD_COMPUTE, 1, 0),
    (OpType.BACKWARD_COMPUTE, 0, 0), (OpType.BACKWARD_COMPUTE, 1, 0),
    ("p2p", -1, -1),  # a pipeline's stages pass activations: sent on stage 0, received on 1
    (OpType.OPTIMIZER, -1, -1),
]


def start_of(rank: int, step: int, i: int) -> float:
    return CLOCK0 + 10.0 * step + 0.1 * rank + i


@pytest.fixture
def scenario():
    return load_scenario("clean-dp2-pp2", overrides={"run": {"steps": STEPS,
                                                             "warmup_steps": WARMUP}})


def fake_run(run_dir: Path, killed: bool = True, missing_rank: int | None = None) -> int:
    """Write trace-parts/rank<r>.bin; with `killed`, rank 3 dies before its last optimizer.

    Returns the number of records written.
    """
    written = 0
    for rank in range(DP * PP):
        if rank == missing_rank:
            continue
        tr = Tracer(run_dir / "trace-parts" / f"rank{rank}.bin")
        for step in range(STEPS):
            tr.begin_step(step)
            for i, (optype, mb_id, mc) in enumerate(OPS):
                if killed and rank == 3 and step == STEPS - 1 and optype is OpType.OPTIMIZER:
                    break
                if optype == "p2p":
                    optype = OpType.FORWARD_SEND if rank < DP else OpType.FORWARD_RECV
                t = start_of(rank, step, i)
                tr.record(optype, t, t + 0.5 + 0.01 * rank, mb_id=mb_id, mc=mc, gmc=mc,
                          seq_len_sq_sum=64.0 * (mb_id + 1) if mb_id >= 0 else float("nan"))
                written += 1
            tr.end_step()
        tr.close()
    return written


def test_assemble_keeps_complete_steps_after_warmup(tmp_path: Path, scenario):
    written = fake_run(tmp_path)
    df, info = assemble_trace(tmp_path, scenario)
    kept_steps = list(range(WARMUP, STEPS - 1))  # step 3 unfinished on rank 3
    assert info["complete_steps"] == kept_steps == [1, 2]
    assert sorted(df["step"].unique()) == kept_steps
    assert info["ops_recorded"] == written == STEPS * DP * PP * len(OPS) - 1
    assert len(df) == len(kept_steps) * DP * PP * len(OPS)
    assert info["ops_dropped"] == written - len(df)
    # Every rank keeps the same ops per step.
    counts = df.groupby(["step", "rank", "optype"], observed=True).size()
    assert (counts == counts.groupby("optype", observed=True).transform("max")).all()


def test_assemble_derives_layout_and_relative_times(tmp_path: Path, scenario):
    fake_run(tmp_path)
    df, info = assemble_trace(tmp_path, scenario)
    assert (df["rank"] == df["stage"] * DP + df["dp_rank"]).all()
    assert set(zip(df["rank"], df["dp_rank"], df["stage"])) == {
        (0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)}
    t0 = start_of(0, WARMUP, 0)  # the earliest kept start; warm-up ops are earlier but dropped
    assert info["clock_origin_monotonic_s"] == t0
    assert df["start_ts"].min() == 0.0
    row = df[(df["rank"] == 3) & (df["step"] == 2) & (df["optype"] == "optimizer")]
    assert len(row) == 1
    assert row["start_ts"].iloc[0] == pytest.approx(start_of(3, 2, len(OPS) - 1) - t0)
    assert row["duration"].iloc[0] == pytest.approx(0.53)
    assert (df["duration"] >= 0).all()
    # seq_ids count per optype within each (step, rank); mb/mc carried through.
    fwd = df[df["optype"] == "forward-compute"]
    assert set(fwd["seq_id"]) == {0, 1} and set(fwd["mb_id"]) == {0, 1}
    opt = df[df["optype"] == "optimizer"]
    assert (opt["seq_id"] == 0).all() and (opt["mb_id"] == -1).all() and (opt["mc"] == -1).all()
    assert np.isnan(opt["seq_len_sq_sum"]).all()
    assert (fwd["seq_len_sq_sum"] == 64.0 * (fwd["mb_id"] + 1)).all()
    # Dtypes and order.
    for col in ("rank", "dp_rank", "stage", "step", "seq_id", "mb_id", "mc", "gmc"):
        assert df[col].dtype == np.int64, col
    assert isinstance(df["optype"].dtype, pd.CategoricalDtype)
    assert list(df["optype"].cat.categories) == list(OPTYPE_VALUES)
    assert df["start_ts"].dtype == np.float64 and df["duration"].dtype == np.float64
    keys = list(zip(df["step"], df["rank"], df["start_ts"]))
    assert keys == sorted(keys)


def test_assemble_clean_run_keeps_all_but_warmup(tmp_path: Path, scenario):
    fake_run(tmp_path, killed=False)
    df, info = assemble_trace(tmp_path, scenario)
    assert info["complete_steps"] == list(range(WARMUP, STEPS))
    assert info["ops_dropped"] == WARMUP * DP * PP * len(OPS)


def test_assemble_missing_rank_keeps_nothing(tmp_path: Path, scenario):
    fake_run(tmp_path, killed=False, missing_rank=2)
    df, info = assemble_trace(tmp_path, scenario)
    assert len(df) == 0 and info["complete_steps"] == []
    assert info["ops_dropped"] == info["ops_recorded"] == (DP * PP - 1) * STEPS * len(OPS)


def test_assemble_no_parts(tmp_path: Path, scenario):
    df, info = assemble_trace(tmp_path, scenario)
    assert len(df) == 0
    assert info == {"complete_steps": [], "ops_recorded": 0, "ops_dropped": 0,
                    "clock_origin_monotonic_s": 0.0}


def test_write_run_folder(tmp_path: Path, scenario):
    fake_run(tmp_path)
    record_in = {"outcome": "failed", "scenario": {"name": "clean-dp2-pp2"}, "seed": 0,
                 "error": {"rank": 3, "kind": "killed", "message": "SIGKILL"}}
    record = write_run_folder(tmp_path, scenario, record_in)
    assert set(p.name for p in tmp_path.iterdir()) >= {
        "trace.parquet", "meta.yaml", "faults.json", "run.json", "trace-parts"}

    df, meta = read_trace(tmp_path / "trace.parquet")  # validated, meta embedded
    assert (meta.dp_size, meta.pp_size, meta.world_size) == (DP, PP, DP * PP)
    assert meta.trial_name == "clean-dp2-pp2"
    assert list(df.columns[: len(COLUMN_NAMES)]) == list(COLUMN_NAMES)
    assert "seq_len_sq_sum" in df.columns
    assert sorted(df["step"].unique()) == [1, 2] and len(df) == 2 * DP * PP * len(OPS)
    assert df["start_ts"].min() == 0.0

    assert JobMeta.load(tmp_path / "meta.yaml") == meta == job_meta(scenario)
    assert yaml.safe_load((tmp_path / "meta.yaml").read_text())["dp_size"] == DP
    assert json.loads((tmp_path / "faults.json").read_text()) == []

    on_disk = read_run(tmp_path)
    assert on_disk == record
    assert {k: on_disk[k] for k in record_in} == record_in
    assert on_disk["trace"]["complete_steps"] == [1, 2]
    assert on_disk["trace"]["ops_recorded"] == STEPS * DP * PP * len(OPS) - 1
    assert on_disk["trace"]["ops_dropped"] == on_disk["trace"]["ops_recorded"] - len(df)
    assert "trace" not in record_in  # the caller's dict is not mutated


def test_write_run_folder_faults_and_empty_trace(tmp_path: Path, scenario):
    from stragglerlab.injectors.registry import build_injectors
    from stragglerlab.scenarios.faults import parse_faults

    specs = parse_faults([{"kind": "crash", "targets": [{"dp_rank": 1, "stage": 0}],
                           "first_step": 2}], dp=DP, pp=PP, steps=STEPS, where="t")
    run = {"outcome": "failed", "error": {"rank": 1, "kind": "worker-died"}}
    record = write_run_folder(tmp_path, scenario, run, build_injectors(specs))
    assert not (tmp_path / "trace.parquet").exists()  # nothing complete: no trace written
    assert (tmp_path / "meta.yaml").exists()
    faults = json.loads((tmp_path / "faults.json").read_text())
    assert faults == [{"kind": "crash", "targets": [{"rank": 1, "dp_rank": 1, "stage": 0}],
                       "first_step": 2, "last_step": None, "requested": {},
                       "measured": {"failed_rank": 1, "failure_kind": "worker-died",
                                    "steps_completed": 0}}]
    assert record["trace"]["complete_steps"] == []


def test_status_seen_skips_only_settled_unchanged_files(tmp_path):
    """RunFolder.status(seen): a status file read well after its mtime, and unchanged since
    (inode, size, mtime), is served from `seen`; one read within STATUS_SETTLED_NS of its
    mtime is read again (a rewrite within the same mtime tick could keep its key)."""
    import os
    import time

    from stragglerlab.run.run_folder import STATUS_SETTLED_NS, RunFolder

    folder = RunFolder(path=tmp_path)
    path = tmp_path / "status" / "rank0.json"
    path.parent.mkdir()

    def write_in_place(step: int, mtime_ns: int) -> None:
        with open(path, "r+" if path.exists() else "w") as f:  # same inode
            f.write(f'{{"step": {step}}}')
        os.utime(path, ns=(mtime_ns, mtime_ns))

    now = time.time_ns()
    seen: dict = {}
    settled = now - 10 * STATUS_SETTLED_NS
    write_in_place(1, settled)
    assert folder.last_step_by_rank(seen) == {0: 1}
    write_in_place(2, settled)  # same inode, size and mtime: taken as unchanged
    assert folder.last_step_by_rank(seen) == {0: 1}
    assert folder.last_step_by_rank() == {0: 2}  # without `seen`, read afresh
    write_in_place(3, settled + 1)  # a later mtime: read again
    assert folder.last_step_by_rank(seen) == {0: 3}

    fresh = time.time_ns() + 100 * STATUS_SETTLED_NS  # (ahead: however slow this test runs)
    write_in_place(4, fresh)
    assert folder.last_step_by_rank(seen) == {0: 4}
    write_in_place(5, fresh)  # same key, but the last read was within the tick: read again
    assert folder.last_step_by_rank(seen) == {0: 5}
