"""Injector registry: fault kind -> injector class, and building injectors from specs.

    injectors = build_injectors(specs, where="config/scenarios.yaml")
"""

from __future__ import annotations

from stragglerlab.faults import FaultKind, FaultSpec
from stragglerlab.injectors.base import Injector

REGISTRY: dict[FaultKind, type[Injector]] = {}


def register(cls: type[Injector]) -> type[Injector]:
    """Class decorator: make cls the injector of cls.kind."""
    REGISTRY[cls.kind] = cls
    return cls


def _load_builtins() -> None:
    # Importing the modules registers them; kept here so `injectors.registry` is the one entry.
    from stragglerlab.injectors import (  # noqa: F401
        crash,
        gc_pauses,
        hang,
        net_delay,
        net_throttle,
        seq_imbalance,
        slow_worker,
        stage_imbalance,
    )


def injector_classes() -> dict[FaultKind, type[Injector]]:
    """Every fault kind with its injector class, in FaultKind order."""
    _load_builtins()
    return {kind: REGISTRY[kind] for kind in FaultKind if kind in REGISTRY}


def build_injectors(specs: list[FaultSpec], where: str = "scenario") -> list[Injector]:
    """One injector per spec (parameters checked)."""
    _load_builtins()
    return [REGISTRY[spec.kind](spec, where) for spec in specs]
