"""A job-wide change of regime within a trace: evidence over time, not across ranks.

The what-if idealizes an op against the same op on peer ranks, over every
step. A fault every peer shares (a throttled link a whole ring or pipeline
waits on) leaves no faster peer to compare with, and the cross-step ideal
then mixes both regimes: the steps before the change read a per-step S far
under 1. Only the same ops' own earlier steps show it (design.md, "Over time
as well as across ranks"). This module finds such a change and says what
changed; the what-if's numbers stay the method's.

A regime change: the one split of the steps (each side at least MIN_SIDE
steps) that fits the log step time best as two constant levels (least
squares), where the median step time moves by REGIME_RATIO or more and the
two sides do not overlap (every step after is longer than every step before,
or shorter): a sustained shift, not one outlier. The kinds that changed are those whose
time per step moved by REGIME_RATIO or more, "on every rank" where each
rank's own time of that kind moved so.

    rc = regime_change(steps, step_s, kind_time)   # RegimeChange | None
    note = rc.note(step_slowdown)                   # one line for the notes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

REGIME_RATIO = 1.5
"""Sustained change of the median step time (either way) that makes a regime change. A
clean run's step time varies by far less: the shipped noise floor's per-step jitter is
15-42 ms on 0.3-0.9 s steps of the DP 2 x PP 2 testbed layouts (config/noise-floor.yaml,
`seconds_per_step`), under 15 %; the faults this names change it by 2.7-8x."""
MIN_SIDE = 2
"""Steps on each side of the change, at least (one step is an outlier, not a regime)."""
LOW_STEP_S = 0.95
"""A per-step S under this is explained in the notes (it ran faster than the ideal that
averages every step) where it is also under the job's own per-step noise (LOW_STEP_SDS)."""
LOW_STEP_SDS = 4.0
"""Robust standard deviations (1.4826 x MAD) of the job's per-step S under its median from
which a step's S is beyond the noise: per-step S of clean testbed traces spreads by 0.06-0.12
(one such deviation) around its median."""
TOP_KINDS = 3
"""Changed kinds named in the note, at most."""


@dataclass(kw_only=True)
class RegimeChange:
    """A sustained change of the job's step time (see the module doc)."""

    step: int
    """The first step of the new regime."""
    before_s: float
    """Median step time before it, s."""
    after_s: float
    """Median step time from it on, s."""
    kinds: dict[str, float] = field(default_factory=dict)
    """Kind -> its time per step after over before (those moved by REGIME_RATIO or more),
    largest change first."""
    every_rank: dict[str, bool] = field(default_factory=dict)
    """Kind -> whether every rank's own time of that kind moved by REGIME_RATIO or more."""

    @property
    def ratio(self) -> float:
        """after_s / before_s."""
        return self.after_s / self.before_s

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"step": self.step, "before_s": self.before_s, "after_s": self.after_s,
                "ratio": self.ratio, "kinds": dict(self.kinds),
                "every_rank": dict(self.every_rank)}

    def note(self, steps, step_slowdown) -> str:
        """One line: what changed, where, and what it does to the per-step S."""
        way = "longer" if self.ratio >= 1 else "shorter"
        factor = self.ratio if self.ratio >= 1 else 1 / self.ratio
        changed = "; ".join(
            f"{k} {v:.1f}x per step" + (" on every rank" if self.every_rank.get(k) else "")
            for k, v in list(self.kinds.items())[:TOP_KINDS]) or "no one kind stands out"
        s = np.asarray(step_slowdown, dtype=float)
        steps = np.asarray(steps)
        before = s[steps < self.step]
        return (f"regime change at step {self.step}: the step time is {factor:.1f}x {way} "
                f"from there on ({self.before_s:.4g} s -> {self.after_s:.4g} s; {changed}): "
                "a change every rank shares (a shared link or switch, or the job itself), "
                "which no comparison across ranks attributes; the cross-step ideal mixes "
                f"both regimes, so per-step S reads {before.min():.2f}-{before.max():.2f} "
                "before it")


def regime_change(steps, step_s, kind_time: pd.DataFrame | None = None
                  ) -> RegimeChange | None:
    """The regime change of a job, None when there is none (module doc). `kind_time`: one
    row per (step, rank, kind) with `time_s`, the time of that kind on that rank in that
    step (None: kinds not named)."""
    steps = np.asarray(steps)
    t = np.asarray(step_s, dtype=float)
    n = t.size
    if n < 2 * MIN_SIDE or not np.isfinite(t).all() or (t <= 0).any():
        return None
    # The split: least squares on log step time (one change-point), sides >= MIN_SIDE.
    x = np.log(t)
    c1, c2 = np.r_[0.0, np.cumsum(x)], np.r_[0.0, np.cumsum(x * x)]
    i = np.arange(MIN_SIDE, n - MIN_SIDE + 1)
    left = c2[i] - c1[i] ** 2 / i
    right = (c2[n] - c2[i]) - (c1[n] - c1[i]) ** 2 / (n - i)
    at = int(i[np.argmin(left + right)])
    a, b = t[:at], t[at:]
    separated = b.min() > a.max() or b.max() < a.min()
    if not separated or abs(np.log(np.median(b) / np.median(a))) < np.log(REGIME_RATIO):
        return None
    rc = RegimeChange(step=int(steps[at]), before_s=float(np.median(t[:at])),
                      after_s=float(np.median(t[at:])))
    if kind_time is not None and len(kind_time):
        _kinds(rc, kind_time)
    return rc


def _kinds(rc: RegimeChange, kt: pd.DataFrame) -> None:
    """Fill rc.kinds and rc.every_rank from per (step, rank, kind) times."""
    after = kt["step"].to_numpy() >= rc.step
    per_step = kt.groupby(["kind", "step"])["time_s"].sum().reset_index()
    side = per_step["step"].to_numpy() >= rc.step
    med = per_step.groupby(["kind", side])["time_s"].median().unstack()
    if med.shape[1] < 2:
        return
    ratio = (med[True] / med[False]).replace([np.inf, -np.inf], np.nan).dropna()
    up = rc.ratio >= 1
    moved = ratio[ratio >= REGIME_RATIO] if up else ratio[ratio <= 1 / REGIME_RATIO]
    moved = moved.sort_values(ascending=not up)
    rank_med = kt.groupby(["kind", "rank", after])["time_s"].median().unstack()
    for kind, v in moved.items():
        rc.kinds[str(kind)] = float(v)
        rows = rank_med.loc[kind] if kind in rank_med.index.get_level_values(0) else None
        if rows is None or rows.shape[1] < 2:
            rc.every_rank[str(kind)] = False
            continue
        r = rows[True] / rows[False]
        rc.every_rank[str(kind)] = bool(((r >= REGIME_RATIO) if up else
                                         (r <= 1 / REGIME_RATIO)).all())


def low_step_note(steps, step_slowdown, rc: RegimeChange | None) -> str | None:
    """A note for per-step S under LOW_STEP_S and beyond the job's per-step noise that no
    regime change explains."""
    s = np.asarray(step_slowdown, dtype=float)
    med = float(np.median(s)) if s.size else 1.0
    sd = 1.4826 * float(np.median(np.abs(s - med))) if s.size else 0.0
    low = np.asarray(steps)[(s < LOW_STEP_S) & (s < med - LOW_STEP_SDS * sd)]
    if rc is not None or not low.size:
        return None
    shown = ", ".join(map(str, low[:6].tolist())) + (" ..." if low.size > 6 else "")
    return (f"per-step S under {LOW_STEP_S} and {LOW_STEP_SDS:g} deviations under the "
            f"median in step(s) {shown} (lowest {s.min():.2f}): those "
            "steps ran faster than the ideal, which averages every step's ops; the steps "
            "around them were slower than the job's usual")
