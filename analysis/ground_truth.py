"""Ground truth of a run, as the scorer needs it: which ranks, which cause, when, how much.

Reads a run folder's `faults.json` (design.md §3), `run.json` and trace, and
turns them into one `RunTruth`: the fault kind, the root-cause label a
detector should give, the set of ranks a detector should name (explicit
targets; every rank for job-wide faults such as GC on all ranks or sequence
imbalance), the first faulty traced step, and the measured job slowdown;
and, for runs with several faults, every fault record on its own
(`FaultTruth`: its ranks, cause, window and, where separable, its slowdown).

The measured job slowdown is taken within the run when at least MIN_BASELINE_STEPS
traced steps run with no fault active, before the first fault or after the last one
ends (faulty-window mean step time / those clean steps' mean: a control in the same
process, free of the host's drift between runs), else against the clean runs of the
suite with the same model, layout and data (mean step time ratio), else it is unknown.

Each fault also says whether op-level traces can place it at all (`observability`:
an older in-process delay slept inside the victim's collective in pure DP cannot be;
the scorer counts such a fault apart) and how far its measured slowdown stands over
its layout family's clean S (`over_floor`, from the shipped noise floor). The in-run
control lives in stragglerlab.analysis.fault_control, what traces can place in
stragglerlab.analysis.fault_observability.

Runs of a mitigation (re-partitioned stages, rebalanced sequences, planned GC)
are not detection cases and are marked `scored = False`. A fault record whose own
measurement shows it never acted (`FaultRecord.took_effect`: GC pauses with no full
collection in their window) is left out of the truth, with a note: no detector could see
it, and a run left with no fault is scored as clean.

    truths = load_truths(["results/slow-worker-1/0", "results/clean-dp2-pp2/0"])
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.fault_control import (
    MIN_BASELINE_STEPS,
    Unmeasured,
    clean_steps,
    fault_windows,
    over_floor,
    run_step_times,
)
from stragglerlab.analysis.fault_observability import (
    alike_ranks,
    fault_ranks,
    observability,
    observable_as,
)
from stragglerlab.run.findings import JOB_WIDE, RootCause
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.run.run_record import RunRecord
from stragglerlab.scenarios.faults import FaultKind, FaultRecord
from stragglerlab.trace.meta import LayoutFamily
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import distinct_runs

CLEAN = "clean"
"""Kind label of a run without faults."""

CAUSE_OF_KIND: dict[str, RootCause] = {k.value: RootCause.of_kind(k) for k in FaultKind}
"""The root-cause label a detector should give for each fault kind: the same spelling."""


@dataclass(kw_only=True)
class FaultTruth:
    """One fault record of faults.json as the scorer needs it (scored on its own)."""

    kind: str
    """Fault kind (FaultKind value)."""
    cause: RootCause
    """Expected root-cause label."""
    ranks: frozenset[int]
    """Global ranks it acts on (every rank for a job-wide fault)."""
    first_step: int
    """First traced step it is active in."""
    last_step: int | None
    """Last step it is active in (inclusive), None = to the end."""
    measured_slowdown: float | None = None
    """Job slowdown over its own window vs the run's clean steps (before the first fault or
    after the last one ends), when separable: over the steps of its window no other fault
    is active in (all of them, or at least MIN_BASELINE_STEPS), else None."""
    unmeasured: Unmeasured | None = None
    """Why `measured_slowdown` is None (None when it was measured)."""
    observable: bool = True
    """False when no op-level trace can place it (`observability`): scored apart."""
    over_floor: float | None = None
    """Its measured slowdown's excess over the highest clean S of its layout family
    ((S - 1) / (S_clean_max - 1), the shipped noise floor): under 1, clean noise alone
    slows a job that much. None when either is unknown."""
    alike: frozenset[int] = frozenset()
    """Ranks op-level traces cannot tell from its own (`alike_ranks`; its own included):
    naming any of them places it. Empty: its own ranks only."""
    observable_as: tuple[RootCause, ...] = ()
    """Causes a finding may name it by (`fault_observability.observable_as`): its own, and
    `job-wide-comm` for a slow link every member of its group waits on (pure DP, the one
    link of a pure PP 2 job). Empty: its own cause only."""
    shared_by: frozenset[int] = frozenset()
    """Where a job-wide cause is in `observable_as`: the ranks that wait on it (its
    group). A job-wide finding naming any of them (or the whole job) places it, and they
    are not false positives of that finding. Empty otherwise."""

    @property
    def seen_as(self) -> tuple[RootCause, ...]:
        """Its own cause and whatever else it may be seen as."""
        return tuple(dict.fromkeys((self.cause, *self.observable_as)))


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
    faults: list[FaultTruth] = field(default_factory=list)
    """Every fault record on its own (empty for a clean run)."""
    dp_size: int = 0
    """DP degree (0: unknown)."""
    pp_size: int = 0
    """PP degree (0: unknown)."""
    n_steps: int = 0
    """Traced steps (for false findings per clean worker-step)."""
    traced_steps: tuple[int, int] | None = None
    """First and last traced step numbers (inclusive); None for a run with no trace."""

    @property
    def family(self) -> str:
        """Layout family value (`pure-dp`, `pure-pp`, `dp+pp`), `?` when unknown."""
        if not self.dp_size or not self.pp_size:
            return "?"
        return LayoutFamily.of(self.dp_size, self.pp_size).value

    @property
    def kinds(self) -> list[str]:
        """Distinct fault kinds of the run (`clean` for none)."""
        return sorted({f.kind for f in self.faults}) or [self.kind]


def _is_mitigation(faults: list[FaultRecord], record: RunRecord) -> bool:
    planned_gc = (record.scenario.get("run") or {}).get("planned_gc_every", 0)
    return bool(planned_gc) or any(f.requested.get("rebalance") for f in faults)


def _fault_truths(faults: list[FaultRecord], world: int, times: pd.Series,
                  first_traced: int, dp_size: int = 0, pp_size: int = 0) -> list[FaultTruth]:
    """Each record on its own; its slowdown = its window's mean step time over the run's
    clean steps (`clean_steps`), when no other fault is active in its window."""
    steps = times.index.to_numpy()
    values = times.to_numpy(dtype=float)
    windows = fault_windows(steps, faults, first_traced)
    active = windows.sum(axis=0)  # faults active per step
    clean = active == 0
    out = []
    for i, f in enumerate(faults):
        window = windows[i]
        others = active - window > 0
        alone = window & ~others
        slowdown, why = None, None
        # Beside another fault over part of its window, a fault is measured on the steps
        # it runs alone when there are enough of them to stand for it.
        shared = (window & others).any()
        if shared and alone.sum() < MIN_BASELINE_STEPS:
            why = Unmeasured.BESIDE_ANOTHER
        elif not clean.any():
            why = Unmeasured.FROM_THE_START
        elif clean.sum() < MIN_BASELINE_STEPS:
            why = Unmeasured.FEW_CLEAN_STEPS
        elif not alone.any():
            why = Unmeasured.NOT_TRACED
        else:
            slowdown = float(values[alone].mean() / values[clean].mean())
        out.append(FaultTruth(kind=f.kind, cause=RootCause.of_kind(f.kind),
                              ranks=frozenset(fault_ranks(f, world)),
                              first_step=max(f.first_step, first_traced),
                              last_step=f.last_step, measured_slowdown=slowdown,
                              unmeasured=why,
                              observable=observability(f, pp_size)[0],
                              over_floor=over_floor(slowdown, dp_size, pp_size),
                              alike=alike_ranks(f, world),
                              observable_as=(seen := observable_as(f, dp_size, pp_size)),
                              shared_by=(frozenset(range(world)) if JOB_WIDE & set(seen)
                                         else frozenset())))
    return out


def _layout_key(record: RunRecord) -> str:
    return json.dumps({k: record.scenario.get(k) for k in ("model", "parallel", "data")},
                      sort_keys=True)


def _faults_inside(faults: list[FaultRecord], times: pd.Series, record: RunRecord,
                   folder: RunFolder) -> None:
    """A completed run's faults start within its steps (or at the one after, where a
    failure is named): a window past the run is a faults.json of another run, or edited,
    and would be scored as a miss no detector could avoid."""
    if not len(times) or not record.ok:
        return  # a failed run may end before a later fault's step: it never acted
    last = int(times.index.max())
    for i, f in enumerate(faults):
        if f.first_step > last + 1:
            raise InputError(f"faults[{i}] ({f.kind}) starts at step {f.first_step}, after "
                             f"the run's last traced step {last}; is this faults.json of "
                             "another run? rerun the training, or fix first_step",
                             str(folder.faults_path))


def load_truths(run_dirs: list[str | Path]) -> list[RunTruth]:
    """Ground truth of every run; job slowdowns use the suite's clean runs as baselines.
    A folder listed twice is an InputError (it would count twice)."""
    distinct_runs(run_dirs, "run_dirs")
    raw = []
    for run_dir in map(Path, run_dirs):
        folder = RunFolder(path=run_dir)
        faults = folder.faults
        # run.json is optional: traces from elsewhere (e.g. workloads.synthetic) have none.
        record = folder.record if folder.has_record else RunRecord(outcome="ok")
        times = (run_step_times(folder) if folder.has_trace or folder.is_general_import
                 else pd.Series())
        _faults_inside(faults, times, record, folder)
        raw.append((folder, faults, record, times))

    # Mean step time of clean runs per layout: the baseline of faults active from the start.
    clean_means: dict[str, list[float]] = {}
    for _folder, faults, record, times in raw:
        if not faults and record.ok and len(times):
            clean_means.setdefault(_layout_key(record), []).append(float(times.mean()))

    truths = []
    for folder, recorded, record, times in raw:
        meta = folder.meta
        world = meta.dp_size * meta.pp_size  # one traced worker per DP x PP cell
        layout = {"dp_size": meta.dp_size, "pp_size": meta.pp_size, "n_steps": len(times),
                  "traced_steps": ((int(times.index.min()), int(times.index.max()))
                                   if len(times) else None)}
        faults = [f for f in recorded if f.took_effect]
        idle = sorted({f.kind for f in recorded if not f.took_effect})
        idle_note = f"left out, measured without effect: {', '.join(idle)}" if idle else ""
        if not faults:
            truths.append(RunTruth(str(folder.path), CLEAN, RootCause.NONE, frozenset(), world,
                                   None, None, note=idle_note, **layout))
            continue
        main = faults[0]
        kind = main.kind  # validated by read_faults: a FaultKind value
        ranks: set[int] = set()
        for f in faults:
            ranks |= fault_ranks(f, world)
        steps = times.index.to_numpy()
        first_traced = int(steps.min()) if len(steps) else 0
        start = max(main.first_step, first_traced)
        truth = RunTruth(str(folder.path), kind, RootCause.of_kind(kind), frozenset(ranks),
                         world, min(max(f.first_step, first_traced) for f in faults), None,
                         faults=_fault_truths(faults, world, times, first_traced,
                                              meta.dp_size, meta.pp_size), **layout)
        if _is_mitigation(faults, record):
            truth.scored, truth.note = False, "mitigation run (not a detection case)"
        elif len(steps):
            last = main.last_step
            in_window = (steps >= start) & ((steps <= last) if last is not None else True)
            control = clean_steps(steps, faults, first_traced)
            values = times.to_numpy()
            if control.sum() >= MIN_BASELINE_STEPS and in_window.any():
                truth.measured_slowdown = float(values[in_window].mean()
                                                / values[control].mean())
                truth.note = ("slowdown measured within the run (fault window vs its clean "
                              "steps)")
            elif clean_means.get(_layout_key(record)) and in_window.any():
                truth.measured_slowdown = float(values[in_window].mean()
                                                / np.mean(clean_means[_layout_key(record)]))
                truth.note = "slowdown measured against the suite's clean runs"
        if truth.scored:
            truth.note = "; ".join(filter(None, (truth.note, idle_note)))
        truths.append(truth)
    return truths
