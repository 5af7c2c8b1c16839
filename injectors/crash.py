"""Crash: one rank dies at the start of a step (the process exits at once, like a lost node).

The launcher sees the dead actor, stops the run and marks it failed with that
rank; the trace keeps every step all ranks finished.

    - kind: crash
      targets: [{dp_rank: 1, stage: 0}]
      first_step: 10
"""

from __future__ import annotations

import os

from stragglerlab.injectors.base import Injector, RankContext, failure_outcome
from stragglerlab.scenarios.faults import FaultKind


class Crash(Injector):
    """os._exit in the victim at first_step."""

    kind = FaultKind.CRASH
    known_params: frozenset[str] = frozenset()
    measures_trace = False

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        if step == self.spec.first_step:
            os._exit(17)  # no cleanup on purpose: a crash does not say goodbye

    def measure(self, trace, run: dict) -> dict:
        return failure_outcome(run)
