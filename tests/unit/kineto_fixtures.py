"""Tiny hand-built Kineto (torch.profiler Chrome-trace) documents for the importer tests.

A DP 2 x PP 2 job (global rank = stage * 2 + dp_rank), steps 3 and 4, one
microbatch pair per step; each rank's clock runs `rank` ms ahead of rank 0's
and its host is node<stage>, so the clip all-reduce ends line up after
alignment. Rewrite the files in tests/data/kineto/dp2-pp2/ with

    .venv/bin/python -m tests.unit.kineto_fixtures
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "kineto"
STEP_US = 10_000.0
BASE_NS = 1_700_000_000_000_000_000


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1,
       **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def rank_doc(rank: int, steps=(3, 4), dp: int = 2, pp: int = 2, pg: bool = True,
             skew_us: float = 1000.0) -> dict:
    """One rank's trace document; its clock runs `skew_us` x rank ahead of rank 0's."""
    stage, dp_rank = divmod(rank, dp)
    skew = skew_us * rank  # this rank's clock offset, us
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "ts": 0,
                       "args": {"name": "python"}}]
    for k in steps:
        t0 = 1_000_000.0 + k * STEP_US + skew
        ev.append(_x(f"ProfilerStep#{k}", t0, STEP_US - 100))
        ev.append(_x("params-all-gather", t0 + 100, 200))
        # A causal 1F1B-like schedule: stage s forwards 1.1 ms after stage s - 1, and
        # backwards 1.5 ms after stage s + 1, so every recv ends after its send starts.
        fwd = t0 + 400 + stage * 1100
        bwd = t0 + 400 + (pp - 1) * 1100 + 2000 + (pp - 1 - stage) * 1500
        end = t0 + 400 + (pp - 1) * 1100 + 2000 + (pp - 1) * 1500 + 3000
        for mb in range(2):
            f = fwd + mb * 1000
            ev.append(_x("forward-compute", f, 800))
            ev.append(_x("forward-compute", f + 10, 700))  # nested: dropped (outermost wins)
            ev.append(_x("aten::mm", f + 20, 500, cat="cpu_op"))
            if stage < pp - 1:  # async send, overlaps the next compute
                ev.append(_x("forward-send", f + 810, 1200))
            if stage > 0:
                ev.append(_x("forward-recv", f - 300, 290))
        for mb in range(2):
            b = bwd + mb * 1500
            if stage < pp - 1:
                ev.append(_x("backward-recv", b - 200, 190))
            ev.append(_x("backward-compute", b, 1400))
            if stage > 0:
                ev.append(_x("backward-send", b + 1410, 80))
        ev.append(_x("grads-reduce-scatter", end, 300))
        ev.append(_x("gloo:reduce_scatter", end + 50, 200, tid=7))
        ev.append(_x("optimizer-clip-main-grad", end + 400, 400))
        ev.append(_x("optimizer", end + 900, 600))
    ev.append(_x("optimizer", 9e9, 1, finished=False))  # never closed: left out
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": dp * pp,
               "ranks": list(range(dp * pp))}]
    if pg:
        mine = [stage * dp + d for d in range(dp)]
        groups.append({"pg_name": "1", "pg_desc": "DATA_PARALLEL_GROUP", "pg_size": dp,
                       "ranks": mine})
    return {"schemaVersion": 1, "host_name": f"node{stage}", "baseTimeNanoseconds": BASE_NS,
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": dp * pp,
                                "pg_count": len(groups), "pg_config": groups},
            "traceEvents": ev}


def write(doc: dict, path: Path) -> Path:
    """Write a document, gzipped when the name ends in .gz."""
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


if __name__ == "__main__":
    for r in range(4):  # two plain, two gzipped
        write(rank_doc(r), FIXTURES / "dp2-pp2" / f"rank{r}.json{'.gz' if r % 2 else ''}")
