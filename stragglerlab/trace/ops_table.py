"""The one reader of ops.parquet (the general op model's table, `op_model.OP_COLUMNS`),
checked against the contract the importer writes, so a damaged or hand-edited table gets
one clear error instead of a what-if of NaN or negative times.

The importer writes every row so that, within a rank's chain for a step (ordered by `k`),
`gap_s` is the row's start minus the previous row's end, `transfer_s` lies in
[0, end_s - start_s], every (rank, step) ends with one `step-end` row, and the rows of
one `group` are one collective (one kind) or one send/recv pair, on two ranks or more. A table that
breaks one of these was not written by `import kineto` as it is.

    ops = read_ops(folder / "ops.parquet", again="re-import the traces ...")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.trace.op_model import (
    HOST_COLUMNS,
    OP_COLUMNS,
    P2P_KINDS,
    STEP_END,
    gap_ends,
    posted_rows,
    previous_points,
    waiter_rows,
)
from stragglerlab.util.errors import InputError

INT_COLUMNS = ("rank", "step", "k", "group", "in_nelems", "out_nelems", "peer", "role",
               "dp_rank", "stage")
"""Columns that hold integers."""
TIME_COLUMNS = ("start_s", "end_s", "gap_s", "transfer_s")
"""Columns that hold finite seconds."""
MAX_RANK = 1 << 20
"""Ranks at or above this are not a job's (a corrupted column)."""
CONTRACT_TOL_S = 1e-6
"""Slack (s) on the chain identities, far above float rounding (~1e-15 s)."""


def read_ops(path: str | Path, again: str) -> pd.DataFrame:
    """The op table at `path`, checked; InputError naming the first broken rule, with
    `again` (how to write it anew) as the fix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stragglerlab.trace.trace_io import frame_from_columns

    where = str(path)

    def fail(what: str) -> None:
        raise InputError(f"the op table {what}; {again}", where)

    try:  # the columns alone: another writer's pandas metadata is not trusted
        ops = frame_from_columns(pq.read_table(path, use_pandas_metadata=False))
    except (OSError, ValueError, pa.ArrowException) as e:
        fail(f"cannot be read ({type(e).__name__}: {str(e)[:160]}; the file or its metadata, "
             "e.g. the arrow schema stored in it, is damaged)")
    missing = [c for c in OP_COLUMNS if c not in ops.columns]
    if missing:
        fail(f"lacks column(s) {', '.join(missing[:6])}")
    if not len(ops):
        fail("holds no ops")
    for col in ("async", "serial"):  # tables written before these columns read as before
        if col not in ops.columns:
            ops[col] = False
        elif not pd.api.types.is_bool_dtype(ops[col]):
            fail(f"column {col!r} holds {ops[col].dtype} values, not booleans")
    if "wait_k" not in ops.columns:  # tables written before it: no row is posted
        ops["wait_k"] = np.int64(-1)
    elif not pd.api.types.is_integer_dtype(ops["wait_k"]):
        fail(f"column 'wait_k' holds {ops['wait_k'].dtype} values, not integers")
    if "ready_s" not in ops.columns:
        ops["ready_s"] = ops["start_s"]
    elif not pd.api.types.is_numeric_dtype(ops["ready_s"]) or not np.isfinite(
            ops["ready_s"].to_numpy(dtype=float)).all() or \
            (ops["ready_s"] > ops["start_s"] + CONTRACT_TOL_S).any():
        fail("column 'ready_s' holds values that are not finite seconds at or before the "
             "row's start_s")
    for col in INT_COLUMNS:
        if not pd.api.types.is_integer_dtype(ops[col]):
            fail(f"column {col!r} holds {ops[col].dtype} values, not integers")
    for col in TIME_COLUMNS:
        if not pd.api.types.is_numeric_dtype(ops[col]) or \
                not np.isfinite(ops[col].to_numpy(dtype=float)).all():
            fail(f"column {col!r} holds values that are not finite numbers of seconds")
    busy = pd.to_numeric(ops["busy_s"], errors="coerce").to_numpy(dtype=float)
    if not pd.api.types.is_numeric_dtype(ops["busy_s"]) or np.isinf(busy).any() or \
            (busy < 0).any():
        fail("column 'busy_s' holds values that are not seconds >= 0 (NaN: not traced)")
    for col in HOST_COLUMNS:  # the host model's inputs: seconds, NaN where none
        if col in ops.columns and (not pd.api.types.is_numeric_dtype(ops[col]) or np.isinf(
                pd.to_numeric(ops[col], errors="coerce").to_numpy(dtype=float)).any()):
            fail(f"column {col!r} holds values that are not seconds (NaN: none)")
    if not pd.api.types.is_string_dtype(ops["kind"]) and ops["kind"].dtype != object:
        fail("column 'kind' does not hold names")
    rank = ops["rank"].to_numpy()
    if (rank < 0).any() or (rank >= MAX_RANK).any():
        fail(f"column 'rank' holds a value outside 0..{MAX_RANK - 1}")
    if ops["rank"].nunique() < 2:
        fail("holds one rank: the what-if compares ranks that do the same work, so it needs "
             "the traces of at least two")
    if ops.duplicated(["rank", "step", "k"]).any():
        r = ops[ops.duplicated(["rank", "step", "k"], keep=False)].iloc[0]
        fail(f"holds two rows at rank {r['rank']}, step {r['step']}, position k {r['k']}")
    ops = ops.sort_values(["rank", "step", "k"], kind="stable").reset_index(drop=True)
    dur = ops["end_s"] - ops["start_s"]
    if (dur < -CONTRACT_TOL_S).any():
        fail("has a row that ends before it starts (end_s < start_s)")
    if ((ops["transfer_s"] < 0) | (ops["transfer_s"] > dur + CONTRACT_TOL_S)).any():
        fail("has a transfer_s outside 0..(end_s - start_s): its transfers are not the ops'")
    posted = posted_rows(ops)
    if posted.any() and ((ops["wait_k"] <= ops["k"]).to_numpy()[posted].any()
                         or (waiter_rows(ops)[posted] < 0).any()):
        fail("has a posted row (async, wait_k >= 0) whose wait_k is not a later position "
             "k of its own chain")
    prev_end = previous_points(ops)
    later = ops["k"] > ops.groupby(["rank", "step"], sort=False)["k"].transform("min")
    if ((gap_ends(ops) - prev_end - ops["gap_s"]).abs()[later] > CONTRACT_TOL_S).any():
        fail("has a gap_s that is not the row's start minus the previous row's end (its "
             "start, for an async row)")
    if (ops["gap_s"][~later] < -CONTRACT_TOL_S).any():  # the time from the step's start
        fail("has a step whose first op has a negative gap_s (it would start before its "
             "step)")
    steps = ops.groupby("rank")["step"].unique().map(lambda v: tuple(sorted(v)))
    if steps.nunique() > 1:
        fail(f"holds other steps on rank {int(steps.index[(steps != steps.iloc[0]).argmax()])}"
             f" than on rank {int(steps.index[0])}: the what-if runs every rank's same steps "
             "together")
    grouped = ops[ops["group"] >= 0]
    p2p = grouped["kind"].isin(P2P_KINDS)
    kinds = grouped["kind"].where(~p2p, "p2p").groupby(grouped["group"]).nunique()
    if (kinds > 1).any():
        fail(f"has a cross-rank group (group {int(kinds.index[(kinds > 1).argmax()])}) "
             "whose members are not one collective or one send/recv pair")
    if (grouped["group"].value_counts() < 2).any():
        fail("has a cross-rank group with one member")
    last = ops.groupby(["rank", "step"], sort=False)["kind"].transform("last")
    ends = (ops["kind"] == STEP_END).groupby([ops["rank"], ops["step"]]).sum()
    if (last != STEP_END).any() or (ends != 1).any():
        fail(f"has a rank's step that does not end with one {STEP_END!r} row")
    return ops
