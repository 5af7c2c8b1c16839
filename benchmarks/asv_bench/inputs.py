"""Benchmark inputs, built once per asv run (setup_cache) into asv's cache folder."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "data" / "reference-traces"


def trace_at_dp(dp: int, folder: Path) -> tuple[str, str]:
    """Write trace.parquet and meta.yaml of a DP-`dp` job (4 stages, 32 steps) into
    `folder`; returns their paths. trace-ST replicated (the issue's workload: 3.47 M ops
    at DP 1,024) when the reference traces are there, else a synthetic job of the same
    layout (8 microbatches, 32 steps)."""
    import pandas as pd
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    trace, meta_path = folder / "trace.parquet", folder / "meta.yaml"
    if (REFERENCE / "trace-ST.parquet").is_file():
        sys.path.insert(0, str(REPO / "benchmarks"))
        from bench_whatif import replicate

        df, meta = replicate(pd.read_parquet(REFERENCE / "trace-ST.parquet"),
                             yaml.safe_load((REFERENCE / "meta-ST.yaml").read_text()), dp)
        df.to_parquet(trace, index=False)
        meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
    else:
        from stragglerlab.trace.trace_io import write_trace
        from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace

        df, meta = synthesize_trace(SyntheticConfig(dp_size=dp, pp_size=4, n_microbatches=8,
                                                    n_steps=32, trial_name=f"synthetic-dp{dp}"))
        write_trace(df, meta, trace)
        meta_path.write_text(yaml.safe_dump(meta.to_dict(), sort_keys=False))
    return str(trace), str(meta_path)
