"""Straggler detectors: the plug-in API (base), the registry, built-in detectors."""

from stragglerlab.analysis.detectors.base import (
           Detector,
           Finding,
           RankRef,
           RootCause,
           Run,
           TraceNeed,
           load_run,
)
from stragglerlab.analysis.detectors.registry import detector_names, get_detector

__all__ = ["Detector", "Finding", "RankRef", "RootCause", "Run", "TraceNeed", "load_run",
           "detector_names", "get_detector"]
