"""Ground truth of a run, as the scorer needs it: which ranks, which cause, when, how much.

Reads a run folder's `faults.json` (design.md §3), `run.json` and trace, and
turns them into one `RunTruth`: the fault kind, the root-cause label a
detector should give, the set of ranks a detector should name (explicit
targets; every rank for job-wide faults such as GC on all ranks or sequence
imbalance), the first faulty traced step, and the measured job slowdown.

The measured job slowdown is taken within the run when the fault starts after
at least MIN_BASELINE_STEPS clean traced steps (faulty-window mean step time /
clean-window mean), else against the clean runs of the suite with the same
model, layout and data (mean step time ratio), else it is unknown.

Runs of a mitigation (re-partitioned stages, rebalanced sequences, planned GC)
are not detection cases and are marked `scored = False`.

    truths = load_truths(["results/slow-worker-1/0", "results/clean-dp2-pp2/0"])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import RootCause
from stragglerlab.analysis.steps import step_times
from stragglerlab.errors import InputError
from stragglerlab.faults import FaultKind
from stragglerlab.meta import JobMeta

CLEAN = "clean"
"""Kind label of a run without faults."""

MIN_BASELINE_STEPS = 3
"""Clean traced steps needed before a fault to measure its slowdown within the run."""

CAUSE_OF_KIND: dict[str, RootCause] = {
    FaultKind.SLOW_WORKER.value: RootCause.WORKER,
    FaultKind.NET_THROTTLE.value: RootCause.NETWORK,
    FaultKind.NET_DELAY.value: RootCause.NETWORK,
    FaultKind.GC_PAUSES.value: RootCause.GC,
    FaultKind.STAGE_IMBALANCE.value: RootCause.STAGE_IMBALANCE,
    FaultKind.SEQ_IMBALANCE.value: RootCause.SEQUENCE_IMBALANCE,
    FaultKind.HANG.value: RootCause.WORKER,
    FaultKind.CRASH.value: RootCause.WORKER,
}
"""The root-cause label a detector should give for each injected fault kind."""


@dataclass
class RunTruth:
    """What a perfect detector would report for one run."""

    run: str
    """Run folder."""
    kind: str
    """Fault kind (FaultKind value) of the run's main fault, or `clean`."""
    cause: RootCause
    """Expected root-cause label (`none` for a clean run)."""
    ranks: frozenset[int]
    """Global ranks a detector should name (empty for a clean run)."""
    world_size: int
    """Traced workers in the job (dp * pp)."""
    fault_start_step: int | None
    """First traced step the fault is active in (None for a clean run)."""
    measured_slowdown: float | None
    """Measured job slowdown caused by the fault (ratio), None when unknown."""
    scored: bool = True
    """False for runs that are not detection cases (mitigations)."""
    note: str = ""
    """Why a run is not scored, or how its slowdown was measured."""


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path.parent}: no {path.name}; is this a run folder written by "
                         f"`stragglerlab train`? ({what})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None


def _is_mitigation(faults: list[dict], record: dict) -> bool:
    planned_gc = (record.get("scenario") or {}).get("run", {}).get("planned_gc_every", 0)
    return bool(planned_gc) or any(f.get("requested", {}).get("rebalance") for f in faults)


def _fault_ranks(fault: dict, world: int) -> set[int]:
    targets = fault.get("targets") or []
    return {int(t["rank"]) for t in targets} if targets else set(range(world))


def run_step_times(run_dir: Path) -> pd.Series:
    """Traced step time per step of a run folder's trace, s."""
    return step_times(pd.read_parquet(run_dir / "trace.parquet",
                                      columns=["step", "start_ts", "duration"]))


def _layout_key(record: dict) -> str:
    scenario = record.get("scenario") or {}
    return json.dumps({k: scenario.get(k) for k in ("model", "parallel", "data")}, sort_keys=True)


def load_truths(run_dirs: list[str | Path]) -> list[RunTruth]:
    """Ground truth of every run; job slowdowns use the suite's clean runs as baselines."""
    raw = []
    for run_dir in map(Path, run_dirs):
        faults = _read_json(run_dir / "faults.json", "ground truth")
        if not isinstance(faults, list):
            raise InputError(f"{run_dir / 'faults.json'}: expected a list of fault records")
        # run.json is optional: traces from elsewhere (e.g. workloads.synthetic) have none.
        record = (_read_json(run_dir / "run.json", "run record")
                  if (run_dir / "run.json").is_file() else {"outcome": "ok"})
        times = run_step_times(run_dir) if (run_dir / "trace.parquet").is_file() else pd.Series()
        raw.append((run_dir, faults, record, times))

    # Mean step time of clean runs per layout: the baseline of faults active from the start.
    clean_means: dict[str, list[float]] = {}
    for _run_dir, faults, record, times in raw:
        if not faults and record.get("outcome") == "ok" and len(times):
            clean_means.setdefault(_layout_key(record), []).append(float(times.mean()))

    truths = []
    for run_dir, faults, record, times in raw:
        meta = JobMeta.load(run_dir / "meta.yaml")
        world = meta.dp_size * meta.pp_size  # one traced worker per DP x PP cell
        if not faults:
            truths.append(RunTruth(str(run_dir), CLEAN, RootCause.NONE, frozenset(), world,
                                   None, None))
            continue
        main = faults[0]
        kind = str(main.get("kind"))
        if kind not in CAUSE_OF_KIND:
            raise InputError(f"{run_dir / 'faults.json'}: unknown fault kind {kind!r}; "
                             f"known: {', '.join(CAUSE_OF_KIND)}")
        ranks: set[int] = set()
        for f in faults:
            ranks |= _fault_ranks(f, world)
        steps = times.index.to_numpy()
        first_traced = int(steps.min()) if len(steps) else 0
        start = max(int(main.get("first_step") or 0), first_traced)
        truth = RunTruth(str(run_dir), kind, CAUSE_OF_KIND[kind], frozenset(ranks), world,
                         start, None)
        if _is_mitigation(faults, record):
            truth.scored, truth.note = False, "mitigation run (not a detection case)"
        elif len(steps):
            last = main.get("last_step")
            in_window = (steps >= start) & ((steps <= last) if last is not None else True)
            before = steps < start
            values = times.to_numpy()
            if before.sum() >= MIN_BASELINE_STEPS and in_window.any():
                truth.measured_slowdown = float(values[in_window].mean() / values[before].mean())
                truth.note = "slowdown measured within the run (fault window vs before)"
            elif clean_means.get(_layout_key(record)) and in_window.any():
                truth.measured_slowdown = float(values[in_window].mean()
                                                / np.mean(clean_means[_layout_key(record)]))
                truth.note = "slowdown measured against the suite's clean runs"
        truths.append(truth)
    return truths
