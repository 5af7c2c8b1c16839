"""Per-rank compute times of a run without our op trace (the torch-wrapper workloads).

A torch workload has no trace.parquet (torch.profiler alone traces it), but
faults.json still reports what a fault measurably did. Each rank appends one
line per step to `compute/rank<r>.jsonl`: `{"step", "compute_s", "step_s"}`,
compute_s being the wall time of its model's Linear layers
(workloads/torch_model.ComputeClock). `measure_frame` turns the finished
steps after warm-up into the rows the injectors' `measure` reads (rank,
dp_rank, stage, step, optype `forward-compute`, duration), so a slow worker's
`measured.factor` is its compute time over its same-stage peers' in the window,
as on our engine.

    log = ComputeLog.for_rank(run_dir, rank); log.append(step, compute_s, step_s)
    frame = measure_frame(run_dir, world, dp, warmup_steps)
    ratio = peer_ratio(run_dir, rank, peers, before_step=6)  # the slow worker's steering
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from stragglerlab.run.run_folder import COMPUTE_DIR


def log_path(run_dir: str | Path, rank: int) -> Path:
    """Where one rank's compute log lives in a run folder."""
    return Path(run_dir) / COMPUTE_DIR / f"rank{rank}.jsonl"


class ComputeLog:
    """One rank's append-only, line-flushed log (a killed run keeps its finished steps)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = None

    @classmethod
    def for_rank(cls, run_dir: str | Path, rank: int) -> ComputeLog:
        return cls(log_path(run_dir, rank))

    def append(self, step: int, compute_s: float, step_s: float) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w")
        self._file.write(json.dumps({"step": step, "compute_s": compute_s,
                                     "step_s": step_s}) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_log(path: Path) -> list[dict]:
    """The complete lines of one rank's log (a torn last line is skipped)."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and {"step", "compute_s", "step_s"} <= set(rec):
            out.append(rec)
    return out


def measure_frame(run_dir: str | Path, world: int, dp: int, warmup_steps: int) -> pd.DataFrame:
    """Compute rows of the steps every rank finished after warm-up (empty if none)."""
    per_rank = {r: read_log(log_path(run_dir, r)) for r in range(world)}
    if not all(per_rank.values()):
        return pd.DataFrame()
    common = set.intersection(*({rec["step"] for rec in recs} for recs in per_rank.values()))
    rows = [{"rank": r, "dp_rank": r % dp, "stage": r // dp, "step": rec["step"],
             "optype": "forward-compute", "duration": float(rec["compute_s"])}
            for r, recs in per_rank.items() for rec in recs
            if rec["step"] in common and rec["step"] >= warmup_steps]
    return pd.DataFrame(rows)


def peer_ratio(run_dir: str | Path, rank: int, peers: list[int], before_step: int,
               window: int = 2, since: int = 0) -> float | None:
    """`rank`'s compute time over the mean of its peers', summed over the latest `window`
    steps in [since, before_step) that all of them logged; None when unknown (none yet).
    The slow-worker injector steers its CPU-quota cut on it when a run has no op trace."""
    logs = {r: {rec["step"]: rec["compute_s"] for rec in read_log(log_path(run_dir, r))
                if since <= rec["step"] < before_step}
            for r in [rank, *peers]}
    common = sorted(set.intersection(*(set(m) for m in logs.values())))[-window:]
    others = [r for r in peers if r != rank]
    if not common or not others:
        return None
    mine = sum(logs[rank][s] for s in common)
    theirs = sum(sum(logs[r][s] for s in common) for r in others) / len(others)
    return mine / theirs if theirs > 0 else None
