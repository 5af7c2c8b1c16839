"""The injector base class: a pure schedule plus side-effect hooks.

An injector is built from one FaultSpec. Its decision logic — which ranks,
which steps, what magnitude — is pure (`active`, `applies_to`, the parameter
checks), so it is tested without Ray or torch. Its side effects live in hooks
that the launcher (driver process) and the engine (rank process) call:

driver:  shape_scenario (workload faults change the scenario before launch),
         on_launch / on_finish (set up and always undo host state)
rank:    on_setup, on_step_start, in_compute / after_compute (inside a traced
         compute op), before_comm (before a P2P send or collective),
         before_send (P2P sends only), on_step_end, undo
after:   measure(trace, run) -> measured magnitudes for faults.json

`undo` and `on_finish` run on success, failure and Ctrl-C alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from stragglerlab.scenarios.faults import FaultKind, FaultRecord, FaultSpec
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import echo, number_hint


@dataclass
class RankContext:
    """What a rank-side hook may use."""

    rank: int
    """Global rank."""
    dp_rank: int
    """Data-parallel rank."""
    stage: int
    """Pipeline stage."""
    cgroup: dict | None = None
    """This rank's CPU isolation: {cpu_dir, period_us, cores}; None when unisolated."""
    run_dir: str = ""
    """The run folder (for side logs)."""
    compute_ops_per_step: int = 0
    """Forward + backward compute ops of this rank per step."""
    net: dict | None = None
    """This run's network namespaces: {run_id, world}; None on loopback."""
    dp_size: int = 1
    """Data-parallel degree of the job (peers of this rank: same stage, other DP ranks)."""
    device: str = "cpu"
    """The rank's torch device (`cpu` or `cuda:N`)."""
    device_factor: float = 1.0
    """How many times slower the rank's device runs now: the slow-worker injector's factor
    while it acts on a CPU rank; the engine's warm-up-rate pacing applies it."""
    paced_to_rate: bool = False
    """Whether the engine now paces compute ops to a fixed nominal rate (`run.pace_rate`
    warmup, after the warm-up steps): a slower device is `device_factor` there."""
    state: dict[str, Any] = field(default_factory=dict)
    """Per-injector scratch space."""


class Injector:
    """Base of every injector; subclasses set `kind` and override the hooks they need."""

    kind: ClassVar[FaultKind]
    needs_targets: ClassVar[bool] = True
    """Whether the fault must name victim workers."""
    needs_netns: ClassVar[bool] = False
    """Whether the run should put each rank in its own network namespace."""
    measures_trace: ClassVar[bool] = True
    """Whether `measure` needs trace rows (else it is measured from run.json alone)."""

    free_params: ClassVar[frozenset[str]] = frozenset()
    """Parameters check_params validates itself (the numeric ones go through `param`)."""
    known_params: ClassVar[frozenset[str] | None] = None
    """Every params key the injector takes, checked before check_params (so a misspelt key
    is named, not reported as a missing one); None (plug-ins): the keys check_params read."""

    def __init__(self, spec: FaultSpec, where: str = "scenario") -> None:
        self.spec = spec
        self.where = where
        self._checked: set[str] = set()
        if self.needs_targets and not spec.targets:
            raise InputError(f"a {spec.kind.value} fault needs targets "
                             "([{dp_rank: D, stage: S}])", where)
        self._refuse_unknown(self.known_params)
        self.check_params()
        self._refuse_unknown(self._checked | self.free_params)

    def _refuse_unknown(self, known: frozenset[str] | set[str] | None) -> None:
        problem = unknown_params(self.spec.params, known)
        if problem:
            raise InputError(f"{self.spec.kind.value}: {problem}; fix the fault's params",
                             self.where)

    # -- pure decision logic -----------------------------------------------------------
    def check_params(self) -> None:
        """Raise InputError for a bad magnitude (override)."""

    def param(self, name: str, default: float | None = None, lo: float | None = None,
              hi: float | None = None) -> float:
        """A numeric parameter, range-checked."""
        self._checked.add(name)
        value = self.spec.params.get(name, default)
        if value is None:
            raise InputError(f"{self.spec.kind.value}: params.{name} is required", self.where)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{self.spec.kind.value}: params.{name} must be a number, "
                             f"got {echo(value)}{number_hint(value)}", self.where)
        if not math.isfinite(value) or (lo is not None and value < lo) or (
                hi is not None and value > hi):
            raise InputError(f"{self.spec.kind.value}: params.{name}={value} outside "
                             f"[{lo}, {hi}]", self.where)
        return float(value)

    def active(self, step: int) -> bool:
        """Whether the fault acts at this step."""
        return self.spec.active(step)

    def applies_to(self, rank: int) -> bool:
        """Whether this rank runs the rank-side hooks (victims; everyone without targets)."""
        return not self.spec.targets or self.spec.targets_rank(rank)

    # -- driver-side hooks -------------------------------------------------------------
    def shape_scenario(self, scenario):
        """Return the scenario the job runs with (workload faults change it)."""
        return scenario

    def on_launch(self, driver: dict) -> None:
        """Driver-side set-up after the ranks exist (driver holds pids, isolation, ...)."""

    def on_finish(self, driver: dict) -> None:
        """Driver-side undo; must be idempotent and never raise."""

    # -- rank-side hooks ---------------------------------------------------------------
    def on_setup(self, ctx: RankContext) -> None:
        """Once, after the rank built its model."""

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        """At the start of every step."""

    def in_compute(self, ctx: RankContext, step: int) -> None:
        """Inside every traced compute op, before the model runs."""

    def after_compute(self, ctx: RankContext, step: int, seconds: float) -> None:
        """Inside every traced compute op, after the model ran for `seconds`."""

    def before_comm(self, ctx: RankContext, step: int) -> None:
        """Before every P2P send post (inside the traced send), and before every traced
        collective (outside it: a delay here makes the rank arrive late)."""

    def before_send(self, ctx: RankContext) -> None:
        """Before each P2P send is posted (on the P2P poster thread)."""

    def on_step_end(self, ctx: RankContext, step: int) -> None:
        """After every step's last op."""

    def undo(self, ctx: RankContext) -> None:
        """Restore everything the rank-side hooks changed; idempotent, never raises."""

    # -- ground truth ------------------------------------------------------------------
    def requested(self) -> dict:
        """Requested magnitudes for faults.json."""
        return dict(self.spec.params)

    def measure(self, trace: pd.DataFrame, run: dict) -> dict:
        """Measured magnitudes from the finished run (override)."""
        return {}

    def record(self, trace: pd.DataFrame, run: dict) -> FaultRecord:
        """The faults.json entry."""
        try:
            measured = self.measure(trace, run) if len(trace) or not self.measures_trace \
                else {}
        except Exception as e:  # noqa: BLE001 - a failed measurement must not lose the run
            measured = {"error": f"{type(e).__name__}: {e}"}
        return FaultRecord(self.spec.kind.value, [t.to_dict() for t in self.spec.targets],
                           self.spec.first_step, self.spec.last_step, self.requested(),
                           measured)


def unknown_params(params: dict, known: frozenset[str] | set[str] | None) -> str | None:
    """'unknown key(s) in params: ...; known: ...' when params holds a key outside `known`
    (None: nothing known yet, no problem), else None."""
    unknown = [] if known is None else sorted(map(str, set(params) - set(known)))
    if not unknown:
        return None
    return (f"unknown key(s) in params: {', '.join(unknown)[:80]}; known: "
            f"{', '.join(sorted(known)) or 'none'}")


def failure_outcome(run: dict) -> dict:
    """What run.json says about a failed run: which rank, what kind, steps kept."""
    err = run.get("error") or {}
    return {"failed_rank": err.get("rank"), "failure_kind": err.get("kind"),
            "steps_completed": len((run.get("trace") or {}).get("complete_steps", []))}


def window(trace: pd.DataFrame, spec: FaultSpec) -> pd.Series:
    """Boolean mask of trace rows inside the fault's step window."""
    inside = trace["step"] >= spec.first_step
    if spec.last_step is not None:
        inside &= trace["step"] <= spec.last_step
    return inside


def compute_ratio(trace: pd.DataFrame, spec: FaultSpec) -> float | None:
    """Victims' mean compute duration over the other workers' of the same stages, in window."""
    compute = trace["optype"].astype(str).str.endswith("-compute") & window(trace, spec)
    victims = trace["rank"].isin([t.rank for t in spec.targets])
    stages = trace["stage"].isin([t.stage for t in spec.targets])
    slow = trace.loc[compute & victims, "duration"]
    others = trace.loc[compute & stages & ~victims, "duration"]
    if len(slow) == 0 or len(others) == 0:
        return None
    return float(slow.mean() / others.mean())
