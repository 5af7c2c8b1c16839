"""Detector registry: built-ins by name, third-party ones through entry points.

A package adds a detector without any change here by declaring, in its
pyproject.toml,

    [project.entry-points."stragglerlab.detectors"]
    mydet = "my_package.module:MyDetector"

where MyDetector subclasses analysis.detectors.base.Detector. The entry point
name is the detector's name (`stragglerlab detect --detector mydet`).

    from stragglerlab.analysis.detectors.registry import get_detector, detector_names
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from stragglerlab.analysis.detectors.base import Detector
from stragglerlab.errors import InputError

ENTRY_POINT_GROUP = "stragglerlab.detectors"

# name -> "module:Class"; imported on first use so listing detectors stays cheap.
BUILTIN: dict[str, str] = {
    "whatif": "stragglerlab.analysis.detectors.whatif:WhatIfDetector",
    "rank-score": "stragglerlab.analysis.detectors.rank_score:RankScoreDetector",
    "op-minmax": "stragglerlab.analysis.detectors.op_minmax:OpMinMaxDetector",
    "last-arrival": "stragglerlab.analysis.detectors.last_arrival:LastArrivalDetector",
    "step-changepoint": "stragglerlab.analysis.detectors.step_changepoint:StepChangepointDetector",
}


def _load(spec: str, where: str) -> type[Detector]:
    module_name, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise InputError(f"detector {where} ({spec}) cannot be loaded: {e}; "
                         "reinstall the package that provides it") from e
    if not (isinstance(cls, type) and issubclass(cls, Detector)):
        raise InputError(f"detector {where} ({spec}) is not a subclass of "
                         "stragglerlab.analysis.detectors.base.Detector")
    return cls


def _plugins() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def detector_names() -> list[str]:
    """Every available detector: built-ins first, then plug-ins (sorted)."""
    plugins = sorted(n for n in _plugins() if n not in BUILTIN)
    return list(BUILTIN) + plugins


def get_detector(name: str) -> Detector:
    """A fresh instance of the detector called `name`."""
    spec = BUILTIN.get(name) or _plugins().get(name)
    if spec is None:
        raise InputError(f"unknown detector {name!r}; available: {', '.join(detector_names())}")
    detector = _load(spec, repr(name))()
    detector.name = name
    return detector
