"""Injector registry: fault kind -> injector class (lazy), plus plug-ins by entry point.

Built-in injectors are named by their fault kind; a package adds one under the
entry-point group `stragglerlab.injectors` (its class subclasses
`stragglerlab.injectors.base.Injector`).

    injectors = build_injectors(specs, where="config/scenarios.yaml")
    injector_classes()[FaultKind.SLOW_WORKER]
"""

from __future__ import annotations

from stragglerlab.injectors.base import Injector, unknown_params
from stragglerlab.scenarios.faults import FaultKind, FaultSpec
from stragglerlab.util.errors import InputError
from stragglerlab.util.plugins import Registry

_PKG = "stragglerlab.injectors"


def _is_injector(obj: object) -> str | None:
    if not (isinstance(obj, type) and issubclass(obj, Injector)):
        return "is not a subclass of stragglerlab.injectors.base.Injector"
    return None


INJECTORS = Registry(kind="injector", group="stragglerlab.injectors", check=_is_injector, builtin={
    FaultKind.SLOW_WORKER.value: f"{_PKG}.slow_worker:SlowWorker",
    FaultKind.NET_THROTTLE.value: f"{_PKG}.net_throttle:NetThrottle",
    FaultKind.NET_DELAY.value: f"{_PKG}.net_delay:NetDelay",
    FaultKind.GC_PAUSES.value: f"{_PKG}.gc_pauses:GcPauses",
    FaultKind.STAGE_IMBALANCE.value: f"{_PKG}.stage_imbalance:StageImbalance",
    FaultKind.SEQ_IMBALANCE.value: f"{_PKG}.seq_imbalance:SeqImbalance",
    FaultKind.HANG.value: f"{_PKG}.hang:Hang",
    FaultKind.CRASH.value: f"{_PKG}.crash:Crash",
})
"""Fault kind value -> injector class."""


def injector_class(kind: FaultKind) -> type[Injector]:
    """The injector class of one fault kind."""
    cls = INJECTORS.load(kind.value)
    assert cls.kind == kind, f"{cls.__name__}.kind is {cls.kind}, registered as {kind}"
    return cls


def injector_classes() -> dict[FaultKind, type[Injector]]:
    """Every fault kind with its injector class, in FaultKind order."""
    return {kind: injector_class(kind) for kind in FaultKind if kind.value in INJECTORS.builtin}


def build_injectors(specs: list[FaultSpec], where: str = "scenario") -> list[Injector]:
    """One injector per spec (parameters checked)."""
    return [injector_class(spec.kind)(spec, where) for spec in specs]


def check_scenario_faults(scenario, config: str | None = None) -> list[Injector]:
    """Every fault of a loaded scenario checked as `train` checks it before anything starts
    (kind, targets, steps, parameters), errors naming the config file and the scenario;
    the injectors built."""
    from stragglerlab.scenarios.faults import parse_faults
    from stragglerlab.scenarios.scenario import DEFAULT_CONFIG

    where = f"{config or DEFAULT_CONFIG} (scenario {scenario.name!r})"
    specs = parse_faults(scenario.faults, scenario.parallel.dp, scenario.parallel.pp,
                         scenario.run.steps, where)
    for i, spec in enumerate(specs):  # a misspelt key named with its fault's index
        problem = unknown_params(spec.params, injector_class(spec.kind).known_params)
        if problem:
            raise InputError(f"faults[{i}] ({spec.kind.value}): {problem}; fix the fault's "
                             "params", where)
    return build_injectors(specs, where)
