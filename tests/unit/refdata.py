"""Where the published reference traces live (../shared beside the repo).

Tests that need them skip when ../shared is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference-traces"


def reference(name: str) -> Path:
    """Path of a reference file, skipping the test when ../shared is absent."""
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference data not found at {path}")
    return path
