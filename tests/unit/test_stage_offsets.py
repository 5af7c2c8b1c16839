"""benchmarks/stage_offsets.py: a heavy stage shows as its ratio over the op type's mean."""

from __future__ import annotations

import pytest

from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace
from tests.unit.bench_modules import load_benchmark


def _module():
    return load_benchmark("stage_offsets")


def test_heavy_last_stage_stands_over_the_others_and_the_mean_is_one():
    df, _ = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=4, last_stage_factor=1.3,
                                             jitter=0.0))
    table = _module().stage_offsets(df)
    assert list(table.columns) == [0, 1, 2, 3]
    for optype in ("forward-compute", "backward-compute"):
        row = table.loc[optype]
        assert row.mean() == pytest.approx(1.0, abs=1e-3)  # equal counts per worker
        assert row[3] / row[0] == pytest.approx(1.3, rel=0.01)


def test_trace_without_compute_is_an_input_error():
    df, _ = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2))
    with pytest.raises(InputError, match="no forward/backward compute"):
        _module().stage_offsets(df[~df["optype"].astype(str).str.endswith("-compute")])
