"""Leading steps that are still settling: a run's first traced steps running long.

Even after warm-up steps, a run's first traced step can run well over the rest (a
clean DP 4 x PP 4 run's first traced step took 15.98 s against ~11 s), and the what-if
averages it into S like any other step. Such steps are detected here and reported (the
what-if result's notes); the analysis itself keeps every step, so results stay comparable
with the artifact's.

A leading step is settling while its measured step time stands over the median of the
run's later half by more than `SETTLING_RATIO` and by more than `SETTLING_SDS` robust
standard deviations of that half (1.4826 x the median absolute deviation), at most a
third of the steps.

    settling_steps([2, 3, 4, ...], [15.98, 11.2, 11.0, ...])   # -> [2]
"""

from __future__ import annotations

import numpy as np

SETTLING_RATIO = 1.05
"""Relative excess over the later half's median from which a leading step is settling."""
SETTLING_SDS = 4.0
"""...and robust standard deviations of the later half it must stand above (noise)."""
MIN_STEPS = 6
"""Runs shorter than this have no later half to judge by: nothing is reported."""


def settling_steps(steps, times) -> list[int]:
    """The leading steps still settling (module docstring); [] when none or too short."""
    t = np.asarray(times, dtype=float)
    if len(t) < MIN_STEPS or not np.isfinite(t).all():
        return []
    ref = t[len(t) // 2:]
    med = float(np.median(ref))
    sd = 1.4826 * float(np.median(np.abs(ref - med)))
    bar = max(med * SETTLING_RATIO, med + SETTLING_SDS * sd)
    out = []
    for step, value in zip(list(steps)[: len(t) // 3], t):
        if value <= bar:
            break
        out.append(int(step))
    return out


def settling_note(steps, times) -> str | None:
    """A one-line note on the settling steps, None when there are none."""
    found = settling_steps(steps, times)
    if not found:
        return None
    t = np.asarray(times, dtype=float)
    ratio = float(t[: len(found)].max() / np.median(t[len(t) // 2:]))
    return (f"first traced step(s) {', '.join(map(str, found))} still settling (up to "
            f"{ratio:.2f}x the later steps' median step time); they are averaged into S: "
            "trace more warm-up steps (run.warmup_steps) or drop them from the trace")
