"""Rank-side fault hooks: the injectors that act on this rank, called at the engine's hook points.

    hooks = FaultHooks(specs, ctx)      # keeps the injectors whose targets include ctx.rank
    hooks.setup(); hooks.step_start(step)
    with hooks.compute(step): run the model     # in_compute / after_compute
    hooks.before_comm(step); hooks.step_end(step); hooks.undo()
"""

from __future__ import annotations

import contextlib

from stragglerlab.injectors.base import RankContext
from stragglerlab.injectors.registry import build_injectors
from stragglerlab.scenarios.faults import FaultSpec
from stragglerlab.workloads.tracer import now


class FaultHooks:
    """Dispatch to the injectors that apply to this rank; undo always runs them all."""

    def __init__(self, specs: list[FaultSpec], ctx: RankContext, scenario=None) -> None:
        self.ctx = ctx
        self.injectors = [i for i in build_injectors(specs) if i.applies_to(ctx.rank)]
        if scenario is not None:
            for inj in self.injectors:  # idempotent: lets injectors read workload sizes
                inj.shape_scenario(scenario)
        self.step = -1

    def __bool__(self) -> bool:
        return bool(self.injectors)

    def setup(self) -> None:
        for inj in self.injectors:
            inj.on_setup(self.ctx)

    def step_start(self, step: int) -> None:
        self.step = step
        for inj in self.injectors:
            inj.on_step_start(self.ctx, step)

    @contextlib.contextmanager
    def compute(self, step: int):
        """Wrap the model call of a compute op (inside its traced span)."""
        for inj in self.injectors:
            inj.in_compute(self.ctx, step)
        start = now()
        yield
        seconds = now() - start
        for inj in self.injectors:
            inj.after_compute(self.ctx, step, seconds)

    def before_comm(self) -> None:
        for inj in self.injectors:
            inj.before_comm(self.ctx, self.step)

    def before_send(self) -> None:
        """On the P2P poster thread, before each send."""
        for inj in self.injectors:
            inj.before_comm(self.ctx, self.step)
            inj.before_send(self.ctx)

    def step_end(self, step: int) -> None:
        for inj in self.injectors:
            inj.on_step_end(self.ctx, step)

    def undo(self) -> None:
        for inj in self.injectors:
            try:
                inj.undo(self.ctx)
            except Exception:  # noqa: BLE001, S110 - undo every injector, whatever one does
                pass
