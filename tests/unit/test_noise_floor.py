"""benchmarks/noise_floor.py: op noise is measured within the step, and noise alone lifts S."""

from __future__ import annotations

import pytest

from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace
from tests.unit.bench_modules import load_benchmark


def _module():
    return load_benchmark("noise_floor")


def test_op_noise_reads_back_the_jitter_and_ignores_stage_offsets():
    mod = _module()
    quiet, _ = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, jitter=0.0,
                                                last_stage_factor=1.5))
    assert mod.op_noise(quiet) == pytest.approx(0.0, abs=1e-9)  # a heavy stage is no noise
    noisy, _ = synthesize_trace(SyntheticConfig(dp_size=4, pp_size=2, n_microbatches=8,
                                                jitter=0.08, seed=3))
    assert mod.op_noise(noisy) == pytest.approx(0.08, rel=0.25)


def test_noise_alone_lifts_s_and_more_noise_lifts_it_more():
    mod = _module()
    assert mod.synthetic_s(2, 2, 4, 0.0, seeds=1) == [pytest.approx(1.0, abs=1e-6)]
    low = mod.synthetic_s(4, 4, 8, 0.03, seeds=2)
    high = mod.synthetic_s(4, 4, 8, 0.10, seeds=2)
    assert all(s > 1.0 for s in low)
    assert min(high) > max(low)


def test_a_trace_without_compute_is_a_clear_error():
    df, _ = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2))
    with pytest.raises(InputError, match="no forward/backward compute"):
        _module().op_noise(df[df["optype"].astype(str) == "optimizer"])
