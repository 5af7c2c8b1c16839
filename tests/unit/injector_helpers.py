"""Shared helpers of the injector tests: specs, contexts and hand-built traces."""

from __future__ import annotations

import itertools
import time

import pandas as pd

from stragglerlab.injectors.base import Injector, RankContext
from stragglerlab.injectors.registry import build_injectors
from stragglerlab.scenarios.faults import FaultKind, FaultSpec, Target

DP = 2
SLEEP_SLACK_S = 0.15  # a loaded 2-core machine may oversleep; never undersleep


def target(dp_rank: int, stage: int, dp: int = DP) -> Target:
    return Target(stage * dp + dp_rank, dp_rank, stage)


def spec(kind: FaultKind, targets=(), first=0, last=None, **params) -> FaultSpec:
    return FaultSpec(kind, tuple(targets), first, last, params)


def build(s: FaultSpec) -> Injector:
    (inj,) = build_injectors([s], where="test.yaml")
    return inj


def ctx_for(t: Target, **kw) -> RankContext:
    return RankContext(t.rank, t.dp_rank, t.stage, **kw)


def trace_of(rows: list[dict], dp: int = DP) -> pd.DataFrame:
    """A trace frame from dicts with step, dp_rank, stage, optype, start_ts, duration, seq_id."""
    df = pd.DataFrame(rows)
    df["rank"] = df["stage"] * dp + df["dp_rank"]
    return df[["step", "dp_rank", "stage", "rank", "optype", "start_ts", "duration", "seq_id"]]


def p2p_pair(step, dp_rank, sender_stage, direction, k, send_start, recv_start, latency):
    """A send and its peer's recv; the recv ends `latency` after the later of both starts."""
    peer = sender_stage + (1 if direction == "forward" else -1)
    end = max(send_start, recv_start) + latency
    return [dict(step=step, dp_rank=dp_rank, stage=sender_stage, optype=f"{direction}-send",
                 start_ts=send_start, duration=end - send_start, seq_id=k),
            dict(step=step, dp_rank=dp_rank, stage=peer, optype=f"{direction}-recv",
                 start_ts=recv_start, duration=end - recv_start, seq_id=k)]


def p2p_trace(latency, steps=range(5), mbs=2, dp=DP) -> pd.DataFrame:
    """DP x PP2 P2P pairs; latency(step, dp_rank, sender_stage, direction, k) -> seconds."""
    rows = []
    for step, d, k in itertools.product(steps, range(dp), range(mbs)):
        t0 = step + 0.1 * k + 0.01 * d
        # Forward: the recv was posted early (waits for the send); backward: the send waits.
        rows += p2p_pair(step, d, 0, "forward", k, t0 + 0.003, t0,
                         latency(step, d, 0, "forward", k))
        rows += p2p_pair(step, d, 1, "backward", k, t0 + 0.05, t0 + 0.052,
                         latency(step, d, 1, "backward", k))
    return trace_of(rows, dp)


def compute_trace(duration, steps=range(4), stages=2, mbs=2, dp=DP) -> pd.DataFrame:
    """Forward/backward compute ops; duration(step, dp_rank, stage, kind) -> seconds."""
    rows = []
    for step, d, s in itertools.product(steps, range(dp), range(stages)):
        t = float(step)
        for kind in ("forward", "backward"):
            for k in range(mbs):
                dur = duration(step, d, s, kind)
                rows.append(dict(step=step, dp_rank=d, stage=s, optype=f"{kind}-compute",
                                 start_ts=t, duration=dur, seq_id=k))
                t += dur
        rows.append(dict(step=step, dp_rank=d, stage=s, optype="optimizer", start_ts=t,
                         duration=5.0, seq_id=0))  # long, but not compute
    return trace_of(rows, dp)


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


