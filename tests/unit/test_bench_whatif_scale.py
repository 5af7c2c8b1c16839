"""benchmarks/bench_whatif_scale.py splits a what-if run by the verb's progress lines: each
line the analysis prints must name one of its parts, or the cost curve would lose it."""

from __future__ import annotations

from stragglerlab.analysis.whatif import ComputeIdeal, run_whatif
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace
from tests.unit.bench_modules import load_benchmark


def test_every_progress_line_of_the_analysis_names_a_part():
    bench = load_benchmark("bench_whatif_scale")
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=4, n_steps=3,
                                                slow_workers=(SlowWorker(1, 1, 1.5),)))
    lines: list[str] = [f"read {len(df):,} ops from trace.parquet"]
    run_whatif(df, meta, "synthetic", progress=lines.append, other_ideals=list(ComputeIdeal))
    lines.append("wrote whatif.json, artifact-format/")
    parts = [bench._stage(line) for line in lines]
    assert "other" not in parts, [ln for ln, p in zip(lines, parts) if p == "other"]
    assert {"read + validate", "graph", "build frame", "replay", "ideal", "by op type",
            "by stage", "by DP rank", "M_W, M_S", "outputs"} <= set(parts)
