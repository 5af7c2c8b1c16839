"""Shared fixtures: a tiny hand-built valid trace (tests/data/tiny_trace.csv).

DP2 x PP2, 2 microbatches, 2 steps (7 and 8) of a 1F1B schedule with every op
type except separate-grads-all-reduce and first-op; sends end when their peer
recvs end, DP collectives end together across DP ranks. The artifact's reference
traces and the differential traces are in tests/data/ too (tests/unit/refdata.py).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.trace_io import write_trace
from tests.unit import monitor_helpers

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def tiny_df() -> pd.DataFrame:
    """The tiny trace as read from CSV (int64 / float64 / str columns)."""
    return pd.read_csv(DATA / "tiny_trace.csv")


@pytest.fixture
def tiny_meta() -> JobMeta:
    return JobMeta.load(DATA / "tiny_meta.yaml")


@pytest.fixture
def tiny_parquet(tmp_path: Path, tiny_df: pd.DataFrame, tiny_meta: JobMeta) -> Path:
    """The tiny trace written as parquet (meta embedded) via write_trace."""
    path = tmp_path / "trace.parquet"
    write_trace(tiny_df, tiny_meta, path)
    return path


@pytest.fixture
def whatif_run(tmp_path, capsys):
    """Synthetic run (dp 2 x pp 2, 10 steps unless overridden), analysed into tmp_path
    (tests/unit/whatif_runs.py)."""
    from stragglerlab.analysis.detectors import Run
    from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace
    from tests.unit.whatif_runs import analysed

    def make(**kwargs) -> Run:
        cfg = SyntheticConfig(**{"dp_size": 2, "pp_size": 2, "n_steps": 10, **kwargs})
        df, meta = synthesize_trace(cfg)
        run = analysed(Run(df, meta, "synthetic"), tmp_path)
        capsys.readouterr()  # the verb's summary
        return run
    return make


# The monitor's synthetic sources (tests/unit/monitor_helpers.py), built once per module.
@pytest.fixture(scope="module")
def slow_src(tmp_path_factory) -> Path:
    """12 steps, DP 1 / stage 1 twice as slow from step 5 on."""
    return monitor_helpers.synth(tmp_path_factory.mktemp("src") / "slow", "--steps", "12",
                                 "--slow", f"1,1,2.0,{monitor_helpers.FAULT_FIRST}")


@pytest.fixture(scope="module")
def window_src(tmp_path_factory) -> Path:
    """20 steps, DP 1 / stage 1 slow over steps 4-7 only."""
    return monitor_helpers.synth(tmp_path_factory.mktemp("src") / "window", "--steps", "20",
                                 "--slow", "1,1,2.0,4,7")
