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

from stragglerlab.analysis.detectors.base import Detector
from stragglerlab.plugins import Registry

ENTRY_POINT_GROUP = "stragglerlab.detectors"
_PKG = "stragglerlab.analysis.detectors"


def _is_detector(obj: object) -> str | None:
    if not (isinstance(obj, type) and issubclass(obj, Detector)):
        return "is not a subclass of stragglerlab.analysis.detectors.base.Detector"
    return None


DETECTORS = Registry(kind="detector", group=ENTRY_POINT_GROUP, check=_is_detector, builtin={
    "whatif": f"{_PKG}.whatif:WhatIfDetector",
    "rank-score": f"{_PKG}.rank_score:RankScoreDetector",
    "op-minmax": f"{_PKG}.op_minmax:OpMinMaxDetector",
    "last-arrival": f"{_PKG}.last_arrival:LastArrivalDetector",
    "step-changepoint": f"{_PKG}.step_changepoint:StepChangepointDetector",
    "bocd": f"{_PKG}.bocd:BocdDetector",
    "minder": f"{_PKG}.minder:MinderDetector",
    "nvrx": f"{_PKG}.nvrx:NvrxDetector",
})
"""Detector name -> class; built-ins imported on first use so listing names stays cheap."""


def detector_names() -> list[str]:
    """Every available detector: built-ins first, then plug-ins (sorted)."""
    return DETECTORS.names()


def get_detector(name: str) -> Detector:
    """A fresh instance of the detector called `name`."""
    detector = DETECTORS.load(name)()
    detector.name = name
    return detector
