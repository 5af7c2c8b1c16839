"""The what-if result equals the artifact's published outputs for trace-AR and trace-ST."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from stragglerlab.analysis.whatif import analyze
from stragglerlab.run.artifact_format import fix_json, result_json
from stragglerlab.trace.meta import JobMeta
from tests.unit.refdata import reference

RTOL = 1e-4


def mismatches(expected, actual, path=""):
    """Every number in expected must be in actual within RTOL; yields (path, exp, act)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        got = {str(k): v for k, v in actual.items()}
        for k, v in expected.items():
            if str(k) not in got:
                yield (f"{path}/{k}", v, "<missing>")
            else:
                yield from mismatches(v, got[str(k)], f"{path}/{k}")
    elif isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            yield (path, expected, actual)
            return
        for i, (e, a) in enumerate(zip(expected, actual)):
            yield from mismatches(e, a, f"{path}[{i}]")
    elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if not isinstance(actual, (int, float)) or not math.isclose(
            actual, expected, rel_tol=RTOL, abs_tol=1e-9
        ):
            yield (path, expected, actual)
    elif expected != actual:
        yield (path, expected, actual)


def count_numbers(tree) -> int:
    if isinstance(tree, dict):
        return sum(count_numbers(v) for v in tree.values())
    if isinstance(tree, list):
        return sum(count_numbers(v) for v in tree)
    return int(isinstance(tree, (int, float)) and not isinstance(tree, bool))


@pytest.fixture(scope="module", params=["AR", "ST"])
def job(request):
    name = request.param
    df = pd.read_parquet(reference(f"trace-{name}.parquet"))
    meta = JobMeta.load(reference(f"meta-{name}.yaml"))
    return name, analyze(df, meta, where=f"trace-{name}.parquet")


def test_result_json_matches_published(job):
    name, result = job
    expected = json.loads(reference(f"result-{name}.json").read_text())
    actual = json.loads(json.dumps(result_json(result)))
    bad = list(mismatches(expected, actual))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:5]}"
    assert count_numbers(expected) > 700  # every step, decomposition and per-step form


@pytest.mark.parametrize("kind,key", [("mw", "Mw"), ("ms", "Ms")])
def test_fix_metrics_match_published(job, kind, key):
    name, result = job
    expected = json.loads(reference(f"{kind}-{name}.json").read_text())
    metric = result.m_w if kind == "mw" else result.m_s
    bad = list(mismatches(expected, fix_json(metric, key)))
    assert not bad, bad


def test_diagnosis_of_reference_jobs(job):
    name, result = job
    if name == "AR":  # one slowed worker: (DP 0, PP 0)
        assert result.top_workers == [(0, 0)]
        assert result.m_w.rem > 0.9
    else:  # stage imbalance: the last stage
        scores = result.slowdown_by(result.by_stage)
        assert max(scores, key=scores.get) == 3
        assert result.m_s.rem > 0.5


@pytest.mark.parametrize("name", ["AR", "ST"])
def test_compact_int_columns_give_the_same_result_bit_for_bit(name):
    """`stragglerlab whatif` reads the trace with compact_ints (int16/int32 columns): its
    result is the default int64 read's, every number, the sim values read-only throughout."""
    from stragglerlab.analysis.whatif import ComputeIdeal, run_whatif
    from stragglerlab.trace.trace_io import read_trace

    trace, meta_path = reference(f"trace-{name}.parquet"), reference(f"meta-{name}.yaml")
    docs = []
    for compact in (False, True):
        df, meta = read_trace(trace, meta_path, compact_ints=compact)
        assert (df["stage"].dtype.itemsize == 2) is compact
        run = run_whatif(df, meta, where=str(trace), other_ideals=list(ComputeIdeal))
        docs.append(json.dumps(run.result.to_json(), sort_keys=True))
    assert docs[0] == docs[1]
