"""Turn one run's raw per-rank records into its run folder.

A run folder holds `trace.parquet` (design.md §3 schema, job meta embedded),
`meta.yaml`, `faults.json` (ground truth; `[]` for a clean run) and `run.json`
(config, versions, seed, wall times, outcome, error if any), next to the raw
`trace-parts/rank<r>.bin` files the ranks appended step by step.

Only steps that every rank finished (its `optimizer` op is recorded) and that
come after the warm-up steps go into trace.parquet, so even a killed run's
trace is complete step by step and analysable; run.json says how many ops of
unfinished steps were left out.

    df, info = assemble_trace(run_dir, scenario)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.atomic import atomic_write_json
from stragglerlab.meta import JobMeta
from stragglerlab.scenario import Scenario
from stragglerlab.schema import OPTYPE_VALUES, OpType
from stragglerlab.trace_io import write_trace
from workloads.tracer import read_records

_OPTIMIZER = OPTYPE_VALUES.index(OpType.OPTIMIZER.value)


def job_meta(scenario: Scenario, run_id: int = 0) -> JobMeta:
    """The job meta of a scenario's run."""
    p = scenario.parallel
    return JobMeta(dp_size=p.dp, pp_size=p.pp, trial_name=scenario.name, run_id=run_id)


def assemble_trace(run_dir: Path, scenario: Scenario) -> tuple[pd.DataFrame, dict]:
    """The trace of the finished steps, and counts describing what was kept."""
    dp = scenario.parallel.dp
    parts = []
    for rank in range(scenario.world_size):
        path = run_dir / "trace-parts" / f"rank{rank}.bin"
        records = read_records(path) if path.exists() else np.zeros(0, dtype=object)
        if len(records):
            frame = pd.DataFrame(records)
            frame["rank"] = rank
            parts.append(frame)
    if not parts:
        return pd.DataFrame(), {"complete_steps": [], "ops_recorded": 0, "ops_dropped": 0}
    raw = pd.concat(parts, ignore_index=True)
    finished = raw[raw["optype"] == _OPTIMIZER].groupby("step")["rank"].nunique()
    complete = finished.index[finished == scenario.world_size]
    complete = complete[complete >= scenario.run.warmup_steps]
    kept = raw[raw["step"].isin(complete)]
    t0 = kept["start"].min() if len(kept) else 0.0
    df = pd.DataFrame({
        "rank": kept["rank"].to_numpy(np.int64),
        "dp_rank": kept["rank"].to_numpy(np.int64) % dp,
        "stage": kept["rank"].to_numpy(np.int64) // dp,
        "step": kept["step"].to_numpy(np.int64),
        "optype": pd.Categorical.from_codes(kept["optype"].to_numpy(np.int64),
                                            categories=list(OPTYPE_VALUES)),
        "start_ts": kept["start"].to_numpy() - t0,
        "duration": np.maximum(kept["end"].to_numpy() - kept["start"].to_numpy(), 0.0),
        "seq_id": kept["seq_id"].to_numpy(np.int64),
        "mb_id": kept["mb_id"].to_numpy(np.int64),
        "mc": kept["mc"].to_numpy(np.int64),
        "gmc": kept["gmc"].to_numpy(np.int64),
        "seq_len_sq_sum": kept["seq_len_sq_sum"].to_numpy(),
    }).sort_values(["step", "rank", "start_ts"], kind="stable", ignore_index=True)
    info = {"complete_steps": [int(s) for s in complete], "ops_recorded": int(len(raw)),
            "ops_dropped": int(len(raw) - len(kept)), "clock_origin_monotonic_s": float(t0)}
    return df, info


def write_run_folder(run_dir: Path, scenario: Scenario, run_record: dict,
                     faults: list[dict] | None = None) -> dict:
    """Write trace.parquet, meta.yaml, faults.json and run.json; returns run.json's dict."""
    meta = job_meta(scenario)
    df, info = assemble_trace(run_dir, scenario)
    if len(df):
        write_trace(df, meta, run_dir / "trace.parquet")
    meta.dump(run_dir / "meta.yaml")
    atomic_write_json(run_dir / "faults.json", faults or [])
    record = dict(run_record, trace=info)
    atomic_write_json(run_dir / "run.json", record)
    return record


def read_run(run_dir: str | Path) -> dict:
    """run.json of a run folder."""
    return json.loads((Path(run_dir) / "run.json").read_text())
