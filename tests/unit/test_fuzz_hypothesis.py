"""Property fuzzing of the validating loaders: any input is either accepted or refused with
one InputError naming the file, never another exception, and what is accepted is sane.

Hypothesis draws JSON trees for faults.json, findings and run.json, job metas
and scenario overrides with extreme numbers, and single-cell mutations of a
valid trace; the hand-written corpus (test_fuzz_cli.py) covers the shapes
users produced, these find the combinations nobody wrote down.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stragglerlab.trace.meta import MAX_WORKERS, JobMeta
from stragglerlab.util.errors import InputError

FAST = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

NUMBERS = st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, -1, 3, 2**31, 2**40, 1e30, float("nan")]))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=8))
TREES = st.recursive(SCALARS, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=6), c, max_size=4)),
    max_leaves=20)
FAULT_KEYS = ["kind", "targets", "first_step", "last_step", "requested", "measured"]


def _fault_like(draw_tree):
    return st.fixed_dictionaries({}, optional={k: draw_tree for k in FAULT_KEYS}).map(
        lambda d: {**{"kind": "slow-worker", "targets": [{"rank": 3, "dp_rank": 1,
                                                           "stage": 1}]}, **d})


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj, allow_nan=True))
    return path


def _refused_or(fn, path: Path):
    try:
        return fn()
    except InputError as e:
        assert str(e).startswith(str(path)), str(e)
        assert "\n" not in str(e)
        return None


@FAST
@given(st.lists(st.one_of(_fault_like(TREES), TREES), max_size=3))
def test_faults_json(tmp_path, records):
    from stragglerlab.scenarios.faults import read_faults

    meta = JobMeta(dp_size=2, pp_size=2)
    path = _write(tmp_path / "faults.json", records)
    faults = _refused_or(lambda: read_faults(path, meta), path)
    for f in faults or []:
        assert 0 <= f.first_step <= 2**53
        assert f.last_step is None or f.first_step <= f.last_step <= 2**53
        for t in f.targets:
            assert 0 <= t["rank"] < 4


@FAST
@given(TREES)
def test_findings_json(tmp_path, findings):
    from stragglerlab.run.findings import read_findings

    doc = {"schema": "stragglerlab.findings/1", "detector": "whatif", "run": "r",
           "online": False, "findings": findings}
    path = _write(tmp_path / "whatif.json", doc)
    _refused_or(lambda: read_findings(path, "whatif"), path)


@FAST
@given(st.dictionaries(st.sampled_from(["outcome", "error", "trace", "wall_s", "seed",
                                        "name", "step_time_s"]), TREES, max_size=4))
def test_run_json(tmp_path, record):
    from stragglerlab.run.run_record import read_run_record

    path = _write(tmp_path / "run.json", record)
    _refused_or(lambda: read_run_record(path, JobMeta(dp_size=2, pp_size=2)), path)


@FAST
@given(st.dictionaries(st.sampled_from(["dp_size", "pp_size", "tp_size", "dsp_size",
                                        "vpp_size", "world_size", "trial_name", "run_id"]),
                       SCALARS, max_size=8))
def test_meta_yaml(tmp_path, fields):
    import yaml

    path = tmp_path / "meta.yaml"
    path.write_text(yaml.safe_dump(fields))
    meta = _refused_or(lambda: JobMeta.load(path), path)
    if meta is not None:
        assert meta.dp_size * meta.pp_size <= MAX_WORKERS


SECTIONS = {
    "parallel": ["dp", "pp", "microbatches"],
    "model": ["n_layers", "hidden", "n_heads", "vocab", "max_seq_len"],
    "run": ["steps", "warmup_steps", "seed", "lr", "clip_norm", "collective_timeout_s",
            "cores_per_rank", "threads_per_rank", "planned_gc_every"],
    "data": ["tokens_per_microbatch", "mean_seq_len", "longtail_sigma"],
}


@FAST
@given(st.sampled_from(sorted(SECTIONS)).flatmap(
    lambda s: st.tuples(st.just(s), st.sampled_from(SECTIONS[s]), NUMBERS)))
def test_scenario_config(tmp_path, change):
    import yaml

    from stragglerlab.scenarios.scenario import load_scenario
    from stragglerlab.scenarios.scenario_limits import max_ranks

    section, key, value = change
    if isinstance(value, float) and not math.isfinite(value):
        value = str(value)  # YAML writes .nan / .inf for these
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"scenarios": {"x": {section: {key: value}}}})
                    .replace("'nan'", ".nan").replace("'inf'", ".inf")
                    .replace("'-inf'", "-.inf"))
    sc = _refused_or(lambda: load_scenario("x", path), path)
    if sc is not None:
        assert sc.world_size <= max_ranks()
        for v in (sc.run.lr, sc.run.collective_timeout_s, sc.data.longtail_sigma):
            assert math.isfinite(v)
        assert sc.run.steps <= 1_000_000


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace

    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_microbatches=2,
                                                n_steps=3))
    return df, meta


CELLS = st.tuples(st.sampled_from(["rank", "dp_rank", "stage", "step", "seq_id", "mb_id",
                                   "mc", "gmc", "start_ts", "duration"]),
                  st.integers(min_value=0, max_value=10_000), NUMBERS)


@FAST
@given(st.lists(CELLS, min_size=1, max_size=3))
def test_trace_cells(tmp_path, trace, changes):
    """A trace with a few cells set to extreme values: refused, or analysed to finite numbers."""
    from stragglerlab.analysis.whatif import run_whatif
    from stragglerlab.trace.validate import validate_trace

    df, meta = trace
    df = df.copy()
    for col, row, value in changes:
        row %= len(df)
        if isinstance(value, int) and abs(value) >= 2**63:
            value = float(value)
        if df[col].dtype.kind in "iu" and not (isinstance(value, int)):
            df[col] = df[col].astype(np.float64)
        df.loc[df.index[row], col] = value
    path = str(tmp_path / "t.parquet")
    try:
        validate_trace(df, meta, path)
    except InputError as e:
        assert str(e).startswith(path) and "\n" not in str(e)
        return
    from stragglerlab.trace.trace_io import normalize_trace

    try:  # the analysis may still refuse it (e.g. a dependency cycle): one InputError
        result = run_whatif(normalize_trace(pd.DataFrame(df)), meta, where=path).result
    except InputError as e:
        assert str(e).startswith(path) and "\n" not in str(e)
        return
    assert math.isfinite(result.slowdown) and result.slowdown > 0
