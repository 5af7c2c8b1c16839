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
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

# The finding records and the root-cause vocabulary are contracts (stragglerlab.run.findings),
# so readers below `analysis` parse findings too; the plug-in API re-exports them here.
from stragglerlab.run.findings import Finding, RankRef, RootCause
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.trace.meta import JobMeta

__all__ = ["Detector", "Finding", "RankRef", "RootCause", "Run", "TraceNeed", "load_run",
           "named_cells"]


class TraceNeed(str, enum.Enum):
    """What a detector needs of a run's trace."""

    STEP_TIMES = "step-times"
    """Steps, ranks, whether a span is compute or communication, and times: any trace,
    an unannotated import's included (its spans: stragglerlab.trace.step_view)."""
    WHATIF = "what-if"
    """The run's what-if: the testbed's whatif/whatif.json and trace, or an unannotated
    import's whatif.json (whose findings then come from the what-if alone)."""
    OP_VOCABULARY = "op-vocabulary"
    """Ops named by the Megatron op vocabulary (`forward-compute`, `grads-reduce-scatter`,
    ...), compared by name across ranks: the testbed's trace, or an annotated import."""


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
    testbed: bool = False
    """The run has a run.json: this testbed trained it (on this kind of host)."""
    vocabulary: bool = True
    """The trace's ops carry the op vocabulary (False: an unannotated import's spans,
    `optype` compute or communication only)."""
    first_step: int | None = None
    """The run's first traced step where the trace is a window of it (an online replay's
    window); None: the trace's own first step."""

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


def named_cells(findings: list[Finding]) -> set[tuple[int, int]]:
    """(dp_rank, stage) of every worker the findings name."""
    return {(r.dp_rank, r.stage) for f in findings for r in f.ranks}


def load_run(run_dir: str | Path) -> Run:
    """Read a run folder (trace.parquet, meta.yaml, run.json if present) through RunFolder."""
    folder = RunFolder(path=Path(run_dir))
    if folder.is_general_import:
        return Run(folder.step_view(), folder.meta, str(folder.path), vocabulary=False)
    run = Run(folder.trace(), folder.meta, str(folder.path))
    if folder.has_record:
        record = folder.record
        run.outcome = record.outcome
        run.error = None if record.error is None else record.error.to_json()
        run.testbed = True
    run.last_step_by_rank = folder.last_step_by_rank()
    return run


class Detector(abc.ABC):
    """Base class of every detector, built-in or third-party."""

    name: ClassVar[str] = ""
    """Registry key, e.g. `whatif`."""
    description: ClassVar[str] = ""
    """One line for `stragglerlab list detectors`."""
    needs: ClassVar[TraceNeed] = TraceNeed.OP_VOCABULARY
    """What it needs of the trace; STEP_TIMES runs on an unannotated import too."""

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
        seen = Run(pd.concat(self._seen, ignore_index=True), self._meta, run.path,
                   vocabulary=run.vocabulary)
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
