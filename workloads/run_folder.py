"""Turn one run's raw per-rank records into its run folder.

A run folder holds `trace.parquet` (design.md §3 schema, job meta embedded),
`meta.yaml`, `faults.json` (ground truth; `[]` for a clean run) and `run.json`
(config, versions, seed, wall times, outcome, error if any, GC pauses), next
to the raw `trace-parts/rank<r>.bin` and `gc/rank<r>.jsonl` files the ranks
appended step by step. The trace gains a `gc_pause_s` column: GC pause time
inside each op.

Only steps that every rank finished (its `optimizer` op is recorded) and that
come after the warm-up steps go into trace.parquet, so even a killed run's
trace is complete step by step and analysable; run.json says how many ops of
unfinished steps were left out.

    df, info = assemble_trace(run_dir, scenario)
    record = write_run_folder(run_dir, scenario, run_record, injectors)

The files are written through the run-folder contract's writers
(stragglerlab.run.run_folder.RunFolder), so what is written is what every reader
accepts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.run.compute_log import measure_frame
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.run.run_record import RunRecord
from stragglerlab.scenarios.scenario import Scenario
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_io import write_trace
from stragglerlab.trace.trace_parts import read_records
from stragglerlab.util.filecheck import Checker
from stragglerlab.workloads.gc_monitor import read_pauses

_OPTIMIZER = OPTYPE_VALUES.index(OpType.OPTIMIZER.value)


def job_meta(scenario: Scenario, run_id: int = 0) -> JobMeta:
    """The job meta of a scenario's run."""
    p = scenario.parallel
    return JobMeta(dp_size=p.dp, pp_size=p.pp, trial_name=scenario.name, run_id=run_id)


def assemble_trace(run_dir: Path, scenario: Scenario,
                   shift: dict[int, float] | None = None) -> tuple[pd.DataFrame, dict]:
    """The trace of the finished steps, and counts describing what was kept.

    shift: seconds subtracted from a rank's timestamps (its node's clock offset to
    rank 0's node on a cluster run, workloads.placement.applied_correction)."""
    dp = scenario.parallel.dp
    shift = shift or {}
    parts = []
    for rank in range(scenario.world_size):
        path = RunFolder(path=run_dir).trace_part_path(rank)
        records = read_records(path) if path.exists() else np.zeros(0, dtype=object)
        if len(records):
            frame = pd.DataFrame(records)
            frame["rank"] = rank
            if shift.get(rank):
                frame["start"] -= shift[rank]
                frame["end"] -= shift[rank]
            parts.append(frame)
    if not parts:
        return pd.DataFrame(), {"complete_steps": [], "ops_recorded": 0, "ops_dropped": 0,
                                "clock_origin_monotonic_s": 0.0}
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


def gc_pauses(run_dir: Path, world: int,
              shift: dict[int, float] | None = None) -> dict[str, list[dict]]:
    """Every rank's logged GC pauses, by rank (on the trace's clock, see assemble_trace)."""
    folder = RunFolder(path=run_dir)
    out = {str(r): read_pauses(folder.gc_log_path(r)) for r in range(world)}
    for r, by in (shift or {}).items():
        for p in out.get(str(r), []):
            p["start"] -= by
    return out


def add_gc_pause_column(df: pd.DataFrame, pauses: dict[str, list[dict]], t0: float) -> None:
    """gc_pause_s: GC pause time (s) that fell inside each op's span."""
    df["gc_pause_s"] = 0.0
    for rank, ps in pauses.items():
        rows = np.flatnonzero(df["rank"].to_numpy() == int(rank))
        if not len(ps) or not len(rows):
            continue
        start = df["start_ts"].to_numpy()[rows]
        end = start + df["duration"].to_numpy()[rows]
        for p in ps:
            p_start = p["start"] - t0
            overlap = np.minimum(end, p_start + p["duration_s"]) - np.maximum(start, p_start)
            df.loc[df.index[rows], "gc_pause_s"] += np.clip(overlap, 0.0, None)


def write_run_folder(run_dir: Path, scenario: Scenario, run_record: dict,
                     injectors: list | None = None) -> dict:
    """Write trace.parquet, meta.yaml, faults.json and run.json; returns run.json's dict."""
    folder = RunFolder(path=Path(run_dir))
    meta = job_meta(scenario)
    shift = {int(r): float(s) for r, s in
             ((run_record.get("clock") or {}).get("rank_correction_s") or {}).items()}
    df, info = assemble_trace(folder.path, scenario, shift)
    pauses = gc_pauses(folder.path, scenario.world_size, shift)
    if len(df):
        add_gc_pause_column(df, pauses, info["clock_origin_monotonic_s"])
        write_trace(df, meta, folder.trace_path)
    folder.write_meta(meta)
    full = [p for ps in pauses.values() for p in ps if p["generation"] == 2]
    record = dict(run_record, trace=info, gc={
        "pauses": pauses, "full_collections": len(full),
        "mean_full_pause_ms": round(1000 * float(np.mean([p["duration_s"] for p in full])), 3)
        if full else None})
    # A torch-wrapper workload has no op trace: faults are measured on its compute log.
    measured_on = df if len(df) else measure_frame(folder.path, scenario.world_size,
                                                   scenario.parallel.dp,
                                                   scenario.run.warmup_steps)
    folder.write_faults([inj.record(measured_on, record) for inj in injectors or []])
    # Validated like any reader would (a bug here fails loudly, not in a later reader).
    typed = RunRecord.from_json(record, Checker(folder.record_path, "a bug in the writer"), meta)
    return folder.write_record(typed)


def read_run(run_dir: str | Path) -> dict:
    """run.json of a run folder (validated), as a dict."""
    return RunFolder(path=Path(run_dir)).record.to_json()
