"""The detector plug-in API: what a detector receives and what it returns.

A detector looks at one run (its trace, job meta and runtime record) and
returns findings: which ranks straggle, over which steps, why, how sure it is
and how much slower the job is for it. Offline, `detect(run)` sees the whole
run. Online, `detect_online(run)` is replayed one step at a time and every
finding carries the step at which it was first reported; the default replays
`detect` on the steps seen so far, a detector with a cheaper incremental form
overrides `observe_step`.

    from stragglerlab.analysis.detectors import load_run, get_detector
    findings = get_detector("whatif").detect(load_run("results/slow-worker-1/0"))

Third-party detectors subclass `Detector` and register through the
`stragglerlab.detectors` entry point group (see analysis/detectors/registry.py).
Pure: no torch, no ray.
"""

from __future__ import annotations

import abc
import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from stragglerlab.errors import InputError
from stragglerlab.faults import Target
from stragglerlab.meta import JobMeta


class RootCause(str, enum.Enum):
    """The closed set of root-cause labels a finding can carry."""

    WORKER = "worker"
    STAGE_IMBALANCE = "stage-imbalance"
    SEQUENCE_IMBALANCE = "sequence-imbalance"
    GC = "gc"
    NETWORK = "network"
    NONE = "none"


RankRef = Target
"""One traced worker a finding names: the same {rank, dp_rank, stage} record as a fault's target."""


@dataclass
class Finding:
    """One straggler a detector reports."""

    ranks: list[RankRef]
    """Workers blamed; empty = the whole job (e.g. sequence imbalance)."""
    first_step: int
    """First step the straggling is seen in (inclusive)."""
    last_step: int
    """Last step it is seen in (inclusive)."""
    root_cause: RootCause
    """Why, as one of the closed labels."""
    confidence: float
    """0..1, how sure the detector is."""
    estimated_slowdown: float | None = None
    """Job slowdown (ratio >= 1) the detector attributes to this finding, if it estimates one."""
    detected_at_step: int | None = None
    """Online mode: the step after which the finding was first reported."""
    detail: dict = field(default_factory=dict)
    """Detector-specific evidence (scores, thresholds), JSON-serializable."""

    def to_dict(self) -> dict:
        """JSON form (the `findings` entries of `stragglerlab detect`)."""
        return {
            "ranks": [r.to_dict() for r in self.ranks],
            "first_step": int(self.first_step),
            "last_step": int(self.last_step),
            "root_cause": self.root_cause.value,
            "confidence": float(self.confidence),
            "estimated_slowdown": (None if self.estimated_slowdown is None
                                   else float(self.estimated_slowdown)),
            "detected_at_step": (None if self.detected_at_step is None
                                 else int(self.detected_at_step)),
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, raw: dict) -> Finding:
        """Inverse of to_dict."""
        return cls(
            ranks=[RankRef(int(r["rank"]), int(r["dp_rank"]), int(r["stage"]))
                   for r in raw.get("ranks", [])],
            first_step=int(raw["first_step"]), last_step=int(raw["last_step"]),
            root_cause=RootCause(raw["root_cause"]), confidence=float(raw["confidence"]),
            estimated_slowdown=raw.get("estimated_slowdown"),
            detected_at_step=raw.get("detected_at_step"), detail=raw.get("detail", {}),
        )


@dataclass
class Run:
    """One run as a detector sees it: the trace, its meta, and the runtime record."""

    trace: pd.DataFrame
    """Per-op trace (design.md §3 columns plus extras such as gc_pause_s)."""
    meta: JobMeta
    """Parallel layout."""
    path: str = ""
    """Where the run came from (for messages)."""
    outcome: str = "ok"
    """`ok` or `failed` (run.json)."""
    error: dict | None = None
    """run.json's error record of a failed run: {rank, kind, message}."""
    last_step_by_rank: dict[int, int] = field(default_factory=dict)
    """Last step each rank finished, from the run's status files (tells a hung or dead rank)."""

    @property
    def steps(self) -> np.ndarray:
        """Traced step numbers, ascending."""
        return np.sort(self.trace["step"].unique())

    def rank_ref(self, rank: int) -> RankRef:
        """RankRef of a global rank (rank = stage * dp + dp_rank, the artifact's order)."""
        return RankRef(int(rank), int(rank) % self.meta.dp_size, int(rank) // self.meta.dp_size)

    def worker(self, dp_rank: int, stage: int) -> RankRef:
        """RankRef of a (dp_rank, stage) worker."""
        return RankRef(int(stage * self.meta.dp_size + dp_rank), int(dp_rank), int(stage))


def load_run(run_dir: str | Path) -> Run:
    """Read a run folder (trace.parquet, meta.yaml, run.json if present)."""
    from stragglerlab.trace_io import read_trace

    run_dir = Path(run_dir)
    trace_path = run_dir / "trace.parquet"
    if not trace_path.is_file():
        raise InputError(f"{run_dir}: no trace.parquet; pass a run folder written by "
                         "`stragglerlab train` (or one holding trace.parquet + meta.yaml)")
    meta_path = run_dir / "meta.yaml"
    trace, meta = read_trace(str(trace_path), str(meta_path) if meta_path.is_file() else None)
    run = Run(trace, meta, str(run_dir))
    record_path = run_dir / "run.json"
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text())
        except json.JSONDecodeError as e:
            raise InputError(f"{record_path}: not valid JSON ({e}); rerun the training") from e
        run.outcome = record.get("outcome", "ok")
        run.error = record.get("error")
    for path in sorted((run_dir / "status").glob("rank*.json")):
        try:
            status = json.loads(path.read_text())
            run.last_step_by_rank[int(path.stem[4:])] = int(status.get("step", -1))
        except (ValueError, json.JSONDecodeError):
            continue  # a status file caught mid-write says nothing
    return run


class Detector(abc.ABC):
    """Base class of every detector, built-in or third-party."""

    name: ClassVar[str] = ""
    """Registry key, e.g. `whatif`."""
    description: ClassVar[str] = ""
    """One line for `stragglerlab detect --list`."""

    @abc.abstractmethod
    def detect(self, run: Run) -> list[Finding]:
        """Findings for the whole run (offline)."""

    online_window_steps: int | None = None
    """Online mode: how many latest steps the default `observe_step` re-analyses (None: all)."""

    def reset(self, meta: JobMeta) -> None:
        """Online mode: forget everything, a new run with this layout starts."""
        self._seen: list[pd.DataFrame] = []
        self._meta = meta

    def observe_step(self, step_trace: pd.DataFrame, run: Run) -> list[Finding]:
        """Online mode: one more step's ops arrived; return the findings known so far.

        The default re-runs `detect` on the steps seen so far (the latest
        `online_window_steps` of them when set); override for an incremental detector.
        """
        self._seen.append(step_trace)
        if self.online_window_steps is not None:
            del self._seen[:-self.online_window_steps]
        seen = Run(pd.concat(self._seen, ignore_index=True), self._meta, run.path)
        return self.detect(seen)

    def detect_online(self, run: Run) -> list[Finding]:
        """Replay the run step by step; each finding keeps the step it was first reported at.

        Findings are matched across steps by (root cause, ranks): the first
        report fixes `detected_at_step`, later reports extend the step range.
        """
        self.reset(run.meta)
        known: dict[tuple, Finding] = {}
        for step, step_trace in run.trace.groupby("step", sort=True):
            for f in self.observe_step(step_trace, run):
                key = (f.root_cause, tuple(sorted(f.ranks)))
                if key in known:
                    first = known[key]
                    first.last_step = max(first.last_step, f.last_step)
                    first.confidence = max(first.confidence, f.confidence)
                    first.estimated_slowdown = f.estimated_slowdown
                else:
                    f.detected_at_step = int(step)
                    known[key] = f
        return list(known.values())
