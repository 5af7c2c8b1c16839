"""A fault's slowdown measured inside its own run: the run's steps with no fault active
are the control (stragglerlab.analysis.ground_truth reads it).

A fault's window is the traced steps it is active in (`fault_windows`); the control is
every traced step with no fault active, before the first window or after the last one
(`clean_steps`). With at least MIN_BASELINE_STEPS of them, a fault's slowdown is its
window's mean step time over theirs: one process, so the host's drift between runs is not
in it. `Unmeasured` says why a fault has no such number and what to change, and
`over_floor` how far a measured slowdown stands over its layout family's clean S.
"""

from __future__ import annotations

import enum
import functools
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.steps import step_times
from stragglerlab.method.noise_floor import noise_floor_option
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.scenarios.faults import FaultRecord
from stragglerlab.trace.meta import LayoutFamily

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
    """Traced step time per step of a run folder's trace (an unannotated import's: of its
    spans, stragglerlab.trace.step_view), s."""
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(path=Path(run_dir))
    if folder.is_general_import:
        return step_times(folder.step_view()[["step", "start_ts", "duration"]])
    return step_times(folder.trace()[["step", "start_ts", "duration"]])
