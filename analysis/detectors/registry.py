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

import dataclasses
import math

from stragglerlab.analysis.detectors.base import Detector
from stragglerlab.analysis.detectors.config_ranges import SettingRangeError
from stragglerlab.util.errors import InputError
from stragglerlab.util.plugins import Registry

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


def get_detector(name: str, settings: dict[str, str] | None = None) -> Detector:
    """A fresh instance of the detector called `name`, with `settings` (config field ->
    value as text, e.g. from `stragglerlab detect --set`) applied to its config."""
    cls = DETECTORS.load(name)
    detector = cls()
    if settings:
        detector = cls(configured(name, getattr(detector, "config", None), settings))
    detector.name = name
    return detector


MAX_SETTING_COUNT = 1_000_000
"""Largest count (steps, windows, intervals) a setting takes: past any trace's length."""


def _out_of_range(key: str, value: object) -> str | None:
    """What is wrong with a parsed setting, None when it is in range. Every detector setting
    is a threshold, share or ratio (>= 0) or a count of steps or intervals (>= 1; a
    warm-up may be 0), so one rule covers every detector's config, plug-ins included; a
    field whose math needs a narrower range checks it in its config's __post_init__
    (config_ranges.py)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        lo = 0 if "warmup" in key else 1
        if not lo <= value <= MAX_SETTING_COUNT:
            return f"expected a count from {lo} to {MAX_SETTING_COUNT:,}"
    elif isinstance(value, float) and value < 0:
        return "expected a number >= 0"
    return None


def configured(name: str, config, settings: dict[str, str]):
    """`config` (a dataclass) with each setting parsed by its field's type; one InputError
    naming the detector, the field and what it takes for an unknown field or a bad value."""
    if config is None or not dataclasses.is_dataclass(config):
        raise InputError(f"detector {name!r} has no settings (no config dataclass)")
    types = {f.name: f.type for f in dataclasses.fields(config)}
    values = {}
    for key, text in settings.items():
        if key not in types:
            raise InputError(f"detector {name!r} has no setting {key!r}; its settings: "
                             f"{', '.join(sorted(types))}")
        current = getattr(config, key)
        kind = type(current) if current is not None else float
        try:
            if kind is bool:
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif kind in (tuple, list):  # a list of names: comma-separated, not characters
                items = [x.strip() for x in text.split(",")]
                if not all(items):
                    raise ValueError(text)
                value = kind(items)
            else:
                value = kind(text)
        except (TypeError, ValueError):
            raise InputError(f"{name} setting {key}={text!r}: expected a {kind.__name__} "
                             f"(now {current!r})") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{name} setting {key}={text!r}: expected a finite number")
        if (problem := _out_of_range(key, value)) is not None:
            raise InputError(f"{name} setting {key}={text!r}: {problem} (now {current!r})")
        values[key] = value
    try:
        return dataclasses.replace(config, **values)
    except SettingRangeError as e:  # a field's own range (config_ranges.py) names itself
        raise InputError(f"{name} setting {e}") from None
    except (TypeError, ValueError) as e:  # a config's own __post_init__ checks
        raise InputError(f"{name} settings {settings}: {e}") from None
