"""Hang: one rank stops making progress at the start of a step (alive, but silent).

Its peers block in their next P2P or collective until the run's collective
timeout, fail, and the launcher attributes the failure to the rank that fell
behind; nothing waits forever.

    - kind: hang
      targets: [{dp_rank: 0, stage: 1}]
      first_step: 10
"""

from __future__ import annotations

import time

from stragglerlab.injectors.base import Injector, RankContext, failure_outcome
from stragglerlab.scenarios.faults import FaultKind

HANG_S = 24 * 3600.0


class Hang(Injector):
    """Sleep 'forever' in the victim at first_step (the launcher kills it)."""

    kind = FaultKind.HANG
    known_params: frozenset[str] = frozenset()
    measures_trace = False

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        if step == self.spec.first_step:
            time.sleep(HANG_S)

    def measure(self, trace, run: dict) -> dict:
        detected = (run.get("error") or {}).get("detected_after_s")
        return dict(failure_outcome(run), detected_after_s=detected)
