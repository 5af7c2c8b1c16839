"""Parity with the artifact on testbed traces it never shipped (tests/data/differential/).

Each folder holds one of our testbed traces with `result-artifact.json`, the
artifact's own tool's output on it. Our `artifact-format/result.json` must
agree on every key to 1e-6 relative (the artifact's trial_name aside). The
traces and the artifact's results are kept in the repository (provenance: NOTICE), so
every clone runs these tests.
"""

from __future__ import annotations

import json
import math

import pytest

from stragglerlab.analysis.whatif import analyze
from stragglerlab.run.artifact_format import result_json
from stragglerlab.trace.trace_io import read_trace
from tests.unit.refdata import DIFFERENTIAL, differential_cases

RTOL = 1e-6
CASES = differential_cases()


def mismatches(expected, actual, path=""):
    """(path, expected, actual) for every value of expected that actual does not match."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            yield (path, "<dict>", actual)
            return
        got = {str(k): v for k, v in actual.items()}
        for k in set(got) - {str(k) for k in expected}:
            yield (f"{path}/{k}", "<absent>", got[k])
        for k, v in expected.items():
            if str(k) not in got:
                yield (f"{path}/{k}", v, "<missing>")
            else:
                yield from mismatches(v, got[str(k)], f"{path}/{k}")
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if not (isinstance(actual, (int, float)) and
                math.isclose(actual, expected, rel_tol=RTOL, abs_tol=1e-12)):
            yield (path, expected, actual)
    elif expected != actual:
        yield (path, expected, actual)


@pytest.mark.parametrize("case", CASES)
def test_result_equals_the_artifacts_on_a_testbed_trace(case):
    folder = DIFFERENTIAL / case
    expected = json.loads((folder / "result-artifact.json").read_text())
    df, meta = read_trace(folder / "trace.parquet", folder / "meta.yaml")
    ours = result_json(analyze(df, meta, where=case))
    expected["job_meta"].pop("trial_name", None)
    ours["job_meta"].pop("trial_name", None)
    bad = list(mismatches(expected, ours))
    assert not bad, f"{case}: {len(bad)} values differ, first: {bad[:5]}"


def test_every_differential_case_is_covered():
    """The eight cases of tests/data/differential/README.md, each with its trace and result."""
    assert CASES == ["clean-dp2-pp2", "clean-dp2-pp4", "delay-pp4-last", "gc-pauses",
                     "net-throttle", "slow-two", "slow-worker-3", "stage-imbalance"], CASES
