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
its layout family's clean S (`over_floor`, from the shipped noise floor).

Runs of a mitigation (re-partitioned stages, rebalanced sequences, planned GC)
are not detection cases and are marked `scored = False`. A fault record whose own
measurement shows it never acted (`FaultRecord.took_effect`: GC pauses with no full
collection in their window) is left out of the truth, with a note: no detector could see
it, and a run left with no fault is scored as clean.

    truths = load_truths(["results/slow-worker-1/0", "results/clean-dp2-pp2/0"])
"""

from __future__ import annotations

import enum
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.steps import step_times
from stragglerlab.errors import InputError
from stragglerlab.faults import FaultKind, FaultRecord
from stragglerlab.filecheck import distinct_runs
from stragglerlab.findings import RootCause
from stragglerlab.meta import LayoutFamily
from stragglerlab.noise_floor import noise_floor_option
from stragglerlab.run_folder import RunFolder
from stragglerlab.run_record import RunRecord

CLEAN = "clean"
"""Kind label of a run without faults."""

MIN_BASELINE_STEPS = 3
"""Clean traced steps needed before a fault to measure its slowdown within the run."""


class Unmeasured(str, enum.Enum):
    """Why a fault's own slowdown was not measured (`FaultTruth.unmeasured`)."""

    FEW_CLEAN_STEPS = "few-clean-steps"
    """Fewer than MIN_BASELINE_STEPS traced steps with no fault active (before the first
    fault's window or after the last one's)."""
    FROM_THE_START = "from-the-start"
    """Active over every traced step (an imbalance the job is built with): no clean step in
    the run to measure it against."""
    BESIDE_ANOTHER = "beside-another-fault"
    """Another fault is active in its window, and fewer than MIN_BASELINE_STEPS of its
    steps run it alone: the two slowdowns are not separable."""
    NOT_TRACED = "not-traced"
    """No traced step of its window runs it alone."""

    @property
    def advice(self) -> str:
        """What a scenario author can change so the next run measures it."""
        return {
            Unmeasured.FEW_CLEAN_STEPS: (
                f"start faults at least {MIN_BASELINE_STEPS} traced steps after the warm-up "
                f"(steps count from 0: first_step >= run.warmup_steps + {MIN_BASELINE_STEPS}), "
                f"or end them (last_step) at least {MIN_BASELINE_STEPS} steps before the run "
                "does"),
            Unmeasured.FROM_THE_START: ("nothing to change for an imbalance the job is "
                                        "built with (the run-level slowdown uses a clean "
                                        "run of the same layout and data in the same "
                                        "`score`, where there is one); a timed fault: start "
                                        "it after the warm-up, or end it before the run "
                                        "does"),
            Unmeasured.BESIDE_ANOTHER: ("give each fault some steps of its own (first_step / "
                                        "last_step) to measure it apart"),
            Unmeasured.NOT_TRACED: "trace the fault's steps (run.steps, last_step)",
        }[self]


def early_start_note(first_steps: list[int], warmup_steps: int,
                     last_steps: list[int | None] | None = None,
                     steps: int | None = None) -> str | None:
    """A note for `train` when the first fault placed mid-run starts too soon after the
    warm-up for the ground truth to measure its slowdown within the run, and no fault
    window ends early enough to leave clean steps after it (`last_steps`, of a run of
    `steps` steps); None otherwise (faults from step 0 are measured against a suite's
    clean runs, as the built-ins are)."""
    first_traced = warmup_steps  # steps count from 0; 0 .. warmup_steps - 1 are untraced
    placed = [s for s in first_steps if s > first_traced]
    if not placed or min(first_steps) < min(placed) or \
            min(placed) - first_traced >= MIN_BASELINE_STEPS:
        return None
    if last_steps and steps is not None and None not in last_steps and \
            steps - 1 - max(last_steps) >= MIN_BASELINE_STEPS:
        return None  # clean steps after every window: the control
    return (f"note: the first fault starts at step {min(placed)}, "
            f"{min(placed) - first_traced} traced step(s) after the warm-up (traced steps "
            f"start at {first_traced}); the ground truth measures a fault's slowdown within "
            f"the run after {MIN_BASELINE_STEPS}, so `score` will list it as unmeasured: "
            f"{Unmeasured.FEW_CLEAN_STEPS.advice}")


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


UNOBSERVABLE_DELAY = "in-process delay (this kernel has no netem)"
"""The mechanism older net-delay records name: the victim slept inside its traced
collective, so in pure DP every rank's collective lengthened alike."""


def observability(fault: FaultRecord, pp_size: int) -> tuple[bool, str]:
    """Whether op-level traces can place the fault at all, and why not. A record may say
    so itself (`measured.observable`); a net delay slept inside the victim's traced
    collective (the old fallback) has no trace of its own in pure DP, where a collective
    is all the victim's communication."""
    said = fault.measured.get("observable")
    if isinstance(said, bool):
        return said, str(fault.measured.get("observable_note", ""))
    if fault.kind == FaultKind.NET_DELAY.value and pp_size == 1 \
            and fault.measured.get("mechanism") == UNOBSERVABLE_DELAY:
        return False, ("a delay inside the victim's traced collective lengthens every "
                       "rank's collective alike in pure DP")
    return True, ""


TC_BOTH_WAYS = "tc-tbf"
"""The net-throttle mechanism that shapes the victim's veth in both directions."""


def alike_ranks(fault: FaultRecord, world: int) -> frozenset[int]:
    """The fault's ranks and those no op-level trace can tell from them. A link throttled
    both ways in a job of two workers: every byte either sends crosses both workers'
    links, so throttling either end times every op alike, and naming the other end
    places the fault as well as naming the victim (its own ranks otherwise)."""
    own = frozenset(_fault_ranks(fault, world))
    if (fault.kind == FaultKind.NET_THROTTLE.value and world == 2
            and fault.measured.get("mechanism") == TC_BOTH_WAYS):
        return frozenset(range(world))
    return own


def _fault_ranks(fault: FaultRecord, world: int) -> set[int]:
    return {int(t["rank"]) for t in fault.targets} if fault.targets else set(range(world))


def over_floor(slowdown: float | None, dp_size: int, pp_size: int) -> float | None:
    """(S - 1) / (S_clean_max - 1) against the shipped floor of the layout's family."""
    clean = _clean_max(LayoutFamily.of(dp_size, pp_size)) if dp_size and pp_size else None
    if slowdown is None or clean is None or clean <= 1.0:
        return None
    return round((slowdown - 1.0) / (clean - 1.0), 3)


@functools.cache
def _clean_max(family: LayoutFamily) -> float | None:
    floor = noise_floor_option(None)
    fam = floor.family(family) if floor is not None else None
    return fam.job_slowdown.max if fam is not None and fam.job_slowdown else None


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
                              ranks=frozenset(_fault_ranks(f, world)),
                              first_step=max(f.first_step, first_traced),
                              last_step=f.last_step, measured_slowdown=slowdown,
                              unmeasured=why,
                              observable=observability(f, pp_size)[0],
                              over_floor=over_floor(slowdown, dp_size, pp_size),
                              alike=alike_ranks(f, world)))
    return out


def fault_windows(steps: np.ndarray, faults: list[FaultRecord],
                  first_traced: int) -> np.ndarray:
    """[faults, steps]: whether each fault is active in each traced step."""
    start = np.array([max(f.first_step, first_traced) for f in faults], dtype=float)
    end = np.array([np.inf if f.last_step is None else f.last_step for f in faults],
                   dtype=float)
    return (steps[None, :] >= start[:, None]) & (steps[None, :] <= end[:, None])


def clean_steps(steps: np.ndarray, faults: list[FaultRecord], first_traced: int) -> np.ndarray:
    """Which traced steps run with no fault active: before the first window or after the
    last one ends (the in-run control)."""
    return ~fault_windows(steps, faults, first_traced).any(axis=0)


def run_step_times(run_dir: Path | RunFolder) -> pd.Series:
    """Traced step time per step of a run folder's trace, s."""
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(path=Path(run_dir))
    return step_times(folder.trace()[["step", "start_ts", "duration"]])


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
        times = run_step_times(folder) if folder.has_trace else pd.Series()
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
            ranks |= _fault_ranks(f, world)
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
