"""Load a script of benchmarks/ as a module (they are scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a fresh module (`name` may name a file in a subfolder,
    e.g. "asv_bench/inputs")."""
    module = name.replace("/", ".")
    spec = importlib.util.spec_from_file_location(module, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod  # dataclasses look their module up while it executes
    spec.loader.exec_module(mod)
    return mod
