"""The evidence pass of the `whatif` detector: every signal its rules read, computed once.

One `Signals` per diagnosis (a run, its what-if evidence, the thresholds in force);
each signal is computed on first use and kept, so a rule that reads the per-step
worker scores or the compute grid never recomputes what another rule already did, and a
diagnosis that never reaches a rule never pays for its signal.

    s = Signals(run=run, evidence=read_evidence(run), config=WhatIfDetectorConfig())
    s.scores        # [pp, dp, steps] per-step worker score min(S_dp, S_stage) over the best
    s.grid          # [pp, dp, steps] own compute per unit of modelled work, GC-free
    s.compute_over_peers  # [pp, dp, steps] the grid over its stage's other DP ranks' median

One measure of a worker's compute against its peers (`compute_over_peers`) serves every
rule that asks whether a worker's own device is slow: GC pauses out, per unit of modelled
work (a rank that drew long sequences is not slow), over the median of the stage's other
DP ranks (the least of many peers drifts down as DP grows).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Run
from stragglerlab.analysis.detectors.signatures import (
    lengths_uniform,
    seq_len_correlation,
    step_worker_scores,
)
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_device import normalized_compute, over_peers
from stragglerlab.analysis.detectors.whatif_evidence import Evidence
from stragglerlab.analysis.over_time import ChangePoint, change_point, step_times
from stragglerlab.method.p2p_pairs import p2p_pair_latency


@dataclass(kw_only=True, eq=False)
class Signals:
    """A run's what-if evidence and the signals derived from it (each computed once)."""

    run: Run
    """The run (trace, meta, outcome)."""
    evidence: Evidence
    """What the what-if analysis says: steps, the mean ideal's metrics, comm excess."""
    config: WhatIfDetectorConfig
    """The thresholds in force (raised to the noise floor where it reaches them)."""

    def with_config(self, config: WhatIfDetectorConfig) -> Signals:
        """The same run and evidence under other thresholds, keeping every signal already
        computed (none depends on a threshold): how the noise floor reads each threshold
        with only that one taken away without recomputing the evidence twelve times."""
        other = Signals(run=self.run, evidence=self.evidence, config=config)
        other.__dict__.update({k: v for k, v in self.__dict__.items()
                               if k not in ("run", "evidence", "config")})
        return other

    @property
    def steps(self) -> np.ndarray:
        """Analysed step numbers, ascending."""
        return self.evidence.steps

    @property
    def view(self) -> object:
        """The mean ideal's metrics (`IdealView`)."""
        return self.evidence.view

    @functools.cached_property
    def scores(self) -> np.ndarray:
        """[pp, dp, steps]: each worker's min(S_dp, S_stage) per step over the step's best."""
        return step_worker_scores(self.evidence.view)

    @functools.cached_property
    def grid(self) -> np.ndarray | None:
        """[pp, dp, steps], s per unit of modelled work: own compute without GC pauses,
        normalized by sum(s^2) where lengths vary (`whatif_device.normalized_compute`);
        what the device and shift rules compare against peers and over time."""
        return normalized_compute(self.run.trace, self.run.meta.pp_size,
                                  self.run.meta.dp_size, self.steps)

    @functools.cached_property
    def compute_over_peers(self) -> np.ndarray | None:
        """[pp, dp, steps]: `grid` over the median of the stage's other DP ranks in that
        step (`whatif_device.over_peers`); None without DP peers or compute ops. What
        every rule reads to call a worker's own device slow."""
        return over_peers(self.grid) if self.run.meta.dp_size >= 2 else None

    @functools.cached_property
    def p2p_pairs(self) -> pd.DataFrame:
        """Every P2P send matched with its receive and their latency
        (`stragglerlab.method.p2p_pairs.p2p_pair_latency`); what the link rule compares."""
        return p2p_pair_latency(self.run.trace)

    @functools.cached_property
    def step_change(self) -> tuple[np.ndarray, ChangePoint | None]:
        """(steps, the job's step-time change-point over them): the evidence over time
        (`analysis.over_time.change_point`), threshold-free."""
        steps, step_s = step_times(self.run.trace)
        return steps, change_point(steps, step_s)

    @functools.cached_property
    def seq_corr(self) -> float | None:
        """Correlation of a microbatch's compute time with its sum(seq_len^2) (None where
        lengths do not vary)."""
        return seq_len_correlation(self.run.trace)

    @functools.cached_property
    def uniform_lengths(self) -> bool:
        """The trace records the microbatches' lengths and they hardly vary
        (`signatures.lengths_uniform`)."""
        return lengths_uniform(self.run.trace)
