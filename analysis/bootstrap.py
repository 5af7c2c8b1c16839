"""Bootstrap confidence intervals over cases (runs) for the scorer's metrics.

Each metric is a function of per-case count vectors (tp, fp, fn, cause hits,
recalled faults, ...), so one resample is a column sum of a [B, n] index draw:
`case_bootstrap` draws the indices once (seeded) and every metric reuses them,
vectorized, no per-resample Python loop over cases.

    boot = CaseBootstrap.draw(n_cases=44, resamples=1000, seed=0)
    lo, hi = boot.ratio_ci(tp, tp + fp)          # precision's 95% interval
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
"""Bootstrap resamples (over cases, with replacement)."""

SEED = 0
"""Seed of the resampling: the same scores give the same intervals."""

LEVEL = 0.95
"""Two-sided confidence level of the percentile intervals."""


@dataclass(frozen=True, kw_only=True)
class CaseBootstrap:
    """A fixed draw of case indices, shared by every metric of one scoring."""

    index: np.ndarray
    """[resamples, n_cases] indices of the cases in each resample."""
    level: float = LEVEL
    """Two-sided confidence level."""

    @classmethod
    def draw(cls, n_cases: int, resamples: int = RESAMPLES, seed: int = SEED,
             level: float = LEVEL) -> CaseBootstrap:
        """Seeded draw; n_cases 0 gives an empty draw (every interval None)."""
        rng = np.random.default_rng(seed)
        index = rng.integers(0, max(n_cases, 1), size=(resamples, n_cases))
        return cls(index=index, level=level)

    def _bounds(self, values: np.ndarray) -> list[float] | None:
        values = values[np.isfinite(values)]
        if values.size == 0:
            return None
        tail = (1.0 - self.level) / 2 * 100
        lo, hi = np.percentile(values, [tail, 100 - tail])
        return [float(lo), float(hi)]

    def sums(self, per_case: np.ndarray) -> np.ndarray:
        """[resamples] sum of a per-case vector in each resample."""
        per_case = np.asarray(per_case, dtype=float)
        if self.index.shape[1] == 0:
            return np.zeros(self.index.shape[0])
        return per_case[self.index].sum(axis=1)

    def ratio_ci(self, num: np.ndarray, den: np.ndarray,
                 empty: float | None = None) -> list[float] | None:
        """Interval of sum(num)/sum(den) (a micro average); `empty` where den sums to 0."""
        n, d = self.sums(num), self.sums(den)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(d > 0, n / np.where(d > 0, d, 1), np.nan if empty is None else empty)
        return self._bounds(r)

    def precision_ci(self, tp: np.ndarray, fp: np.ndarray,
                     fn: np.ndarray) -> list[float] | None:
        """Interval of the micro precision tp / (tp + fp), with the point estimate's rule
        where nothing was predicted: 1 when nothing was missed either, else 0."""
        t, f, m = self.sums(tp), self.sums(fp), self.sums(fn)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(t + f > 0, t / np.where(t + f > 0, t + f, 1),
                         np.where(m > 0, 0.0, 1.0))
        return self._bounds(r)

    def f1_ci(self, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> list[float] | None:
        """Interval of the micro-averaged F1 = 2tp / (2tp + fp + fn)."""
        return self.ratio_ci(2 * np.asarray(tp, float),
                             2 * np.asarray(tp, float) + np.asarray(fp) + np.asarray(fn),
                             empty=1.0)

    def median_ci(self, values: np.ndarray) -> list[float] | None:
        """Interval of the median of a per-case value (NaN = not measured in that case)."""
        values = np.asarray(values, dtype=float)
        if self.index.shape[1] == 0:
            return None
        draw = values[self.index]
        measured = np.isfinite(draw).any(axis=1)
        if not measured.any():
            return None
        return self._bounds(np.nanmedian(draw[measured], axis=1))
