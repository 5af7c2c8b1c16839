"""The general op model: a job as per-rank chains of communication ops with the compute
segments between them (for traces without the Megatron op vocabulary).

A contract shared by the importer that builds it (stragglerlab.importers.
kineto_general) and the what-if that reads it (stragglerlab.analysis.
whatif_general). One table, one row per communication op of one rank in one
step, in the rank's issue order, plus one closing `step-end` row per rank and
step:

    rank step k kind pg group start_s end_s gap_s transfer_s busy_s role dp_rank stage ...

* `gap_s` is the compute segment *before* the row: from the previous row's
  *point* (the step start for k = 0) to the row's ready time (`ready_s`: its
  start, or on a GPU, when its inputs were ready if it queued behind earlier
  collectives). A row's point is its end, or its ready time where it is
  `async` (the rank went on computing while it ran); the step-end row's gap
  starts past every async op of the step (the step waits for them), and a
  `serial` row (an NCCL kernel on the rank's in-order stream) also waits for
  the rank's earlier ops to end. A `posted` async row (`wait_k` >= 0: a
  send/recv a helper thread posted ahead while the rank computed on) is
  waited for at one later row of its chain, the one at position `wait_k`:
  that row's gap starts no earlier than the posted row's end.
  `previous_points` and `gap_ends` are that rule. It is signed: a
  communication op issued while the previous one still runs overlaps it.
* `group` ties the rows that are one collective (or one send/recv pair)
  across ranks: a group starts when its last member arrives. -1 = a local op
  (no peer was traced, or the step end), which waits for nobody.
* `transfer_s` is the row's end minus the latest start in its group (the
  waiting part removed), clamped at 0; a local op's own duration.

    from stragglerlab.trace.op_model import OP_COLUMNS, STEP_END, CommKind
"""

from __future__ import annotations

import enum

import numpy as np
import pandas as pd

STEP_END = "step-end"
"""The `kind` of the closing row of each rank's step chain."""
COMPUTE = "compute"
"""The name attribution uses for the compute segments (the gaps)."""
OPS_SCHEMA = "stragglerlab.ops/1"
"""Schema tag written beside ops.parquet."""


class CommKind(str, enum.Enum):
    """Communication kinds the importer names (others keep their normalized torch name)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    BARRIER = "barrier"
    SEND = "send"
    RECV = "recv"
    SEND_RECV = "sendrecv"


P2P_KINDS = frozenset({CommKind.SEND.value, CommKind.RECV.value})


class Model(str, enum.Enum):
    """Which op model an import used."""

    VOCABULARY = "vocabulary"
    """Megatron-vocabulary record_function ranges -> the trace schema (trace.parquet)."""
    GENERAL = "general"
    """Unannotated: communication ops and compute segments -> ops.parquet."""


OP_COLUMNS: dict[str, str] = {
    "rank": "global rank",
    "step": "ProfilerStep number",
    "k": "position in the rank's chain for the step, from 0 (the step-end row is last)",
    "kind": "communication kind (CommKind value or torch's name), or 'step-end'",
    "pg": "process group key ('' unknown); P2P: 'src->dst'",
    "group": "id of the cross-rank group (collective or P2P pair), -1 local",
    "start_s": "start, seconds on the aligned job clock (from 0)",
    "end_s": "end, seconds on the aligned job clock",
    "gap_s": "compute segment before the op: start minus the previous row's end (signed)",
    "transfer_s": "end minus the latest start in its group, >= 0 (local: own duration)",
    "busy_s": "GPU kernel busy time inside the segment before the op (NaN on CPU traces)",
    "in_nelems": "In msg nelems (-1 unknown)",
    "out_nelems": "Out msg nelems (-1 unknown)",
    "peer": "P2P peer rank (-1 n/a)",
    "role": "ranks with the same role do the same work (same stage / comm signature)",
    "dp_rank": "data-parallel rank from the layout (-1 unknown)",
    "stage": "pipeline stage from the layout (-1 unknown)",
}
"""Columns of ops.parquet and their meaning."""
OPTIONAL_COLUMNS: dict[str, str] = {
    "async": "the rank went on computing while the op ran (False: it waited for the op)",
    "ready_s": "when the op's inputs were ready on its rank (its start, or before it when it "
               "queued on the GPU behind the rank's earlier collectives); the gap ends here",
    "serial": "the op waits for the rank's earlier communication ops of the step (one "
              "in-order NCCL stream)",
    "wait_k": "an async row posted ahead: the position k of the later row of its chain that "
              "waits for its end (its gap starts no earlier); -1: only the step end waits "
              "for it (every row that is not posted)",
    "host_s": "GPU traces, the host model (importers/general_host.py): host time from the "
              "previous row's launch call (or the step start) to this row's (or the CPU step "
              "end), up to its last wait for the device; NaN: no host model for the rank",
    "host_after_s": "host time after that wait (0 without one)",
    "sync_s": "device work from the previous row's point to that wait's return (NaN: none)",
    "sync_gate_s": "host time to the last launch the device waited for before that wait's "
                   "return (NaN: none)",
    "sync_tail_s": "time from that launch to the wait's return (NaN: none)",
    "device_s": "the segment without the GPU's idle time before ops that started as their "
                "launch returned",
    "gate_back_s": "host time from the segment's last such launch to this row's launch "
                   "(NaN: none)",
    "gate_tail_s": "time from that launch to the row's ready time (NaN: none)",
}
"""Columns of ops.parquet that tables written before them lack (read as their default:
async False, ready_s = start_s, serial False, wait_k -1, no host model)."""
HOST_COLUMNS = ("host_s", "host_after_s", "sync_s", "sync_gate_s", "sync_tail_s", "device_s",
                "gate_back_s", "gate_tail_s")
"""The host model's columns (in OPTIONAL_COLUMNS; stragglerlab.importers.general_host)."""


def posted_rows(ops: pd.DataFrame) -> np.ndarray:
    """Per row, whether it is posted ahead: async with a `wait_k` (see the module doc)."""
    if "wait_k" not in ops or "async" not in ops:
        return np.zeros(len(ops), bool)
    return ops["async"].to_numpy(bool) & (ops["wait_k"].to_numpy() >= 0)


def waiter_rows(ops: pd.DataFrame) -> np.ndarray:
    """Per row of `ops`, the index of the row that waits for it where it is posted (the row
    of its chain at position `wait_k`; -1 where there is none), else -1."""
    out = np.full(len(ops), -1, dtype=np.int64)
    posted = np.flatnonzero(posted_rows(ops))
    if posted.size:
        rows = pd.DataFrame({"rank": ops["rank"].to_numpy(), "step": ops["step"].to_numpy(),
                             "k": ops["k"].to_numpy(), "row": np.arange(len(ops))})
        want = rows.iloc[posted][["rank", "step"]].assign(
            k=ops["wait_k"].to_numpy()[posted], of=posted)
        hit = want.merge(rows, on=["rank", "step", "k"], how="left")
        out[hit["of"].to_numpy()] = hit["row"].fillna(-1).to_numpy(np.int64)
    return out


def previous_points(ops: pd.DataFrame) -> np.ndarray:
    """Per row of `ops` (sorted by rank, step, k), the point its gap is measured from (NaN
    for a chain's first row): the previous row's end, or its ready time (`ready_s`, else
    its start) when that row is async; for the step-end row, also the latest end of the
    chain's async ops that are not posted; for a row that waits for posted rows, also
    their latest end (see the module doc). Times in ops' `start_s`/`end_s` units."""
    asy = ops["async"].to_numpy(bool) if "async" in ops else np.zeros(len(ops), bool)
    posted = posted_rows(ops)
    start, end = ops["start_s"].to_numpy(float), ops["end_s"].to_numpy(float)
    ready = ops["ready_s"].to_numpy(float) if "ready_s" in ops else start
    frame = pd.DataFrame({"point": np.where(asy, ready, end),
                          "aend": np.where(asy & ~posted, end, -np.inf)})
    keys = [ops["rank"].to_numpy(), ops["step"].to_numpy()]
    chain = frame.groupby(keys, sort=False)
    prev = chain["point"].shift(1).to_numpy(float)
    if (asy & ~posted).any():
        before = chain["aend"].cummax().groupby(keys, sort=False).shift(1)
        is_end = ops["kind"].to_numpy() == STEP_END
        prev = np.where(is_end, np.fmax(prev, before.to_numpy(float)), prev)
    if posted.any():
        waiter = waiter_rows(ops)
        have = posted & (waiter >= 0)  # (ops_table refuses a wait_k outside its chain)
        waited = np.full(len(ops), -np.inf)
        np.maximum.at(waited, waiter[have], end[have])
        prev = np.where(np.isfinite(waited), np.fmax(prev, waited), prev)
    return prev


def gap_ends(ops: pd.DataFrame) -> np.ndarray:
    """Per row, where its gap ends: its ready time (`ready_s`, else its start); the step
    end's own start for the step-end row."""
    start = ops["start_s"].to_numpy(float)
    if "ready_s" not in ops:
        return start
    return np.where(ops["kind"].to_numpy() == STEP_END, start, ops["ready_s"].to_numpy(float))
