"""Where the published reference traces and the differential traces live: in the
repository, under tests/data/ (their provenance and licence: NOTICE at the root).

`tests/data/reference-traces/` holds two of the OSDI'25 artifact's sample jobs with the
artifact's own outputs for them; `tests/data/differential/` holds testbed traces with
the artifact's tool's result on each. A clone with nothing beside it runs every test
that reads them; a missing file is a failure, never a skip.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
REFERENCE = DATA / "reference-traces"
DIFFERENTIAL = DATA / "differential"


def reference(name: str) -> Path:
    """Path of a reference file (it must be there: the repository keeps them)."""
    path = REFERENCE / name
    assert path.exists(), f"reference data missing from the repository: {path}"
    return path


def differential_cases() -> list[str]:
    """The differential cases: folders holding a trace and the artifact's result on it."""
    return sorted(p.name for p in DIFFERENTIAL.iterdir()
                  if (p / "trace.parquet").exists() and (p / "result-artifact.json").exists())
