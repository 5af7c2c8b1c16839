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


def general_ops_at_dp(dp: int, pp: int = 2, steps: int = 5, microbatches: int = 4,
                      seed: int = 0):
    """A general op table (stragglerlab.trace.op_model) of a DP-`dp` x PP-`pp` job shaped
    like the engine's pipelines: per rank and step, each microbatch's forward send/recv
    between neighbouring stages, the backward ones the other way, the last stage's
    receives of the next forward posted ahead (async, waited for two ops on), then one DP
    all-reduce per stage; compute gaps with 5 % jitter and one 1.5x rank."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for stage in range(pp):
        for d in range(dp):
            rank = stage * dp + d
            slow = 1.5 if rank == 1 else 1.0
            for step in range(steps):
                ops = []
                for m in range(microbatches):
                    if stage > 0:
                        ops.append(("recv", ("f", stage - 1, stage, m), stage - 1))
                    if stage < pp - 1:
                        ops.append(("send", ("f", stage, stage + 1, m), stage + 1))
                for m in range(microbatches):
                    if stage < pp - 1:
                        ops.append(("recv", ("b", stage + 1, stage, m), stage + 1))
                    if stage > 0:
                        ops.append(("send", ("b", stage, stage - 1, m), stage - 1))
                ops.append(("all_reduce", ("ar", stage), -1))
                t = step * 10.0
                for k, (kind, key, peer_stage) in enumerate(ops):
                    gap = 0.01 * slow * (1 + 0.05 * rng.standard_normal())
                    t += gap
                    posted = kind == "recv" and key[0] == "f" and k + 2 < len(ops)
                    # a P2P pair by (direction, link, microbatch, step, DP rank); an
                    # all-reduce by (stage, step)
                    group = (key, step) + ((d,) if key[0] != "ar" else ())
                    rows.append({"rank": rank, "step": step, "k": k, "kind": kind,
                                 "key": group, "d": d, "peer_stage": peer_stage, "start_s": t,
                                 "end_s": t + 0.002, "gap_s": gap, "transfer_s": 0.002,
                                 "async": posted, "wait_k": k + 2 if posted else -1})
                    t += 0.0 if posted else 0.002
                rows.append({"rank": rank, "step": step, "k": len(ops), "kind": "step-end",
                             "key": None, "d": d, "peer_stage": -1, "start_s": t + 0.01,
                             "end_s": t + 0.01, "gap_s": 0.01, "transfer_s": 0.0,
                             "async": False, "wait_k": -1})
    df = pd.DataFrame(rows)
    df["group"] = pd.factorize(df["key"], use_na_sentinel=True)[0]  # the step end: -1
    df["pg"], df["busy_s"], df["ready_s"], df["serial"] = "", np.nan, df["start_s"], False
    df["in_nelems"] = df["out_nelems"] = np.int64(-1)
    df["peer"] = np.where(df["peer_stage"] >= 0, df["peer_stage"] * dp + df["d"], -1)
    df["role"] = df["stage"] = df["rank"] // dp
    df["dp_rank"] = df["d"]
    return df.drop(columns=["key", "d", "peer_stage"])
