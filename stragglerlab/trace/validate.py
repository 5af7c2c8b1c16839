"""Check a trace table against the schema and its job meta before anything analyses it.

    from stragglerlab.trace.validate import validate_trace
    validate_trace(df, meta, "trace.parquet")   # raises InputError, returns None if fine

Each failed check raises one `InputError` naming the file, the problem, a few
offending rows (0-based row positions in the file, with their step, dp_rank and
stage) and what to fix. Checks run in this order, so the first message is about
the most basic problem: columns present, non-empty, column types, NaN, negative
durations, optype vocabulary, meta vs trace, that every step holds the same ops
for every (dp_rank, stage) worker, and finally plausibility (ids in range,
seq_id 0..n-1, clocks and durations; stragglerlab/trace/trace_checks.py). Everything is
vectorized: a 3.5M-row trace validates in a fraction of a second.

`validate_table` runs the same checks on a TraceTable whose columns are plain numpy
arrays already (what read_trace_table gives), with no pandas: the parsing of a frame's
columns is the frame's edge, every check after it is one function of arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import (
    COLUMN_NAMES,
    EXTRA_COLUMNS,
    OPTIONAL_NAN,
    OPTYPE_VALUES,
    TRACE_COLUMNS,
)
from stragglerlab.trace.trace_checks import check_plausible
from stragglerlab.trace.trace_columns import (
    SHOW,
    check_column,
    check_values,
    fmt_value,
    numeric_column,
    rows_text,
)
from stragglerlab.trace.trace_table import TraceTable, optype_codes
from stragglerlab.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

def _check_optypes(df: pd.DataFrame, path: str) -> np.ndarray:
    import pandas as pd  # a frame is given: pandas is loaded

    codes = optype_codes(df["optype"])
    unknown = codes < 0
    if unknown.any():
        names = ", ".join(fmt_value(v) for v in pd.unique(df["optype"][unknown].astype(object)))
        raise InputError(
            f"unknown optype value(s) {names} in {rows_text(df, unknown, 'optype')}; "
            f"allowed: {', '.join(OPTYPE_VALUES)}; rename these ops or drop the rows",
            path,
        )
    return codes


def _check_meta_ranges(
    df: pd.DataFrame | TraceTable, dp: np.ndarray, stage: np.ndarray, meta: JobMeta, path: str
) -> np.ndarray:
    """dp_rank / stage inside the meta's sizes and every cell present; returns the cell ids."""
    for name, values, size_name, size in (
        ("dp_rank", dp, "dp_size", meta.dp_size),
        ("stage", stage, "pp_size", meta.pp_size),
    ):
        bad = (values < 0) | (values >= size)
        if bad.any():
            raise InputError(
                f"{name} outside [0, {size_name}={size}) of the job meta in "
                f"{rows_text(df, bad)}; fix {size_name} in the job meta or the {name} values",
                path,
            )
    cell = dp * meta.pp_size
    cell += stage
    if meta.dp_size * meta.pp_size * len(OPTYPE_VALUES) < np.iinfo(np.int32).max:
        cell = cell.astype(np.int32)  # half the memory; cell * len(OPTYPE_VALUES) still fits
    present = np.bincount(cell, minlength=meta.dp_size * meta.pp_size) > 0
    if not present.all():
        missing = np.flatnonzero(~present)
        listed = ", ".join(f"({c // meta.pp_size}, {c % meta.pp_size})" for c in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise InputError(
            f"the trace holds {int(present.sum())} of the dp_size*pp_size = "
            f"{meta.dp_size}*{meta.pp_size} = {meta.dp_size * meta.pp_size} (dp_rank, stage) "
            f"cells the job meta implies; missing (dp_rank, stage): {listed}{more}; "
            "trace every worker or fix dp_size/pp_size in the job meta",
            path,
        )
    return cell


def _check_one_rank_per_worker(df: pd.DataFrame | TraceTable, cell: np.ndarray,
                               rank: np.ndarray,
                               meta: JobMeta, path: str) -> None:
    """Every row of a (dp_rank, stage) worker carries one rank, and no two workers share
    one: findings name workers by rank, so a rank column out of step with the cells would
    name the wrong rank (its numbering is the job's own: not checked against a formula)."""
    first = np.full(meta.dp_size * meta.pp_size, -1, dtype=np.int64)
    first[cell[::-1]] = rank[::-1]  # each cell's rank on its first row (last write wins)
    odd = rank != first[cell]
    if odd.any():
        raise InputError(
            f"rank differs within one (dp_rank, stage) worker in "
            f"{rows_text(df, odd, 'rank')}; each worker's rows carry its one global rank: "
            "fix the tracer's rank column",
            path,
        )
    ranks, counts = np.unique(first, return_counts=True)
    if (counts > 1).any():
        shared = int(ranks[counts > 1][0])
        cells = np.flatnonzero(first == shared)
        named = ", ".join(f"({c // meta.pp_size}, {c % meta.pp_size})" for c in cells[:4])
        raise InputError(
            f"rank {shared} is the rank of {len(cells)} (dp_rank, stage) workers ({named}); "
            "each worker has its own global rank: fix the tracer's rank column",
            path,
        )


def dense_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each value in the sorted distinct values, the sorted distinct values), for
    integer values of any width (step numbers). The index is int32 where the values are
    fewer than 2**31: widen it before multiplying."""
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span <= 4 * len(values) + 1_000_000:
        # Step numbers are a compact range in practice: O(n) lookup instead of a sort.
        shifted = np.subtract(values, lo, dtype=np.int64)
        present = np.bincount(shifted, minlength=span) > 0
        remap = np.cumsum(present) - 1
        if len(values) < np.iinfo(np.int32).max:
            remap = remap.astype(np.int32)
        return remap[shifted], np.flatnonzero(present) + lo
    uniq, idx = np.unique(values, return_inverse=True)
    return idx.ravel(), uniq


def _check_complete(
    cell: np.ndarray, step: np.ndarray, opt: np.ndarray, meta: JobMeta, path: str
) -> tuple[np.ndarray, np.ndarray]:
    """Every step holds every cell, and each (cell, optype) the same number of rows.

    Returns (dense step index of each row, the sorted distinct steps).
    """
    nopt = len(OPTYPE_VALUES)
    ncell = meta.dp_size * meta.pp_size
    step_idx, steps = dense_ids(step)
    nsteps = len(steps)
    # Counts per (step, cell, optype) kept sparse (key, count): on bad input (e.g. one
    # step per row) the dense grid could be huge. bincount is the fast path for sane sizes.
    flat = step_idx.astype(np.int64)  # int64: no overflow however many steps
    flat *= ncell * nopt
    flat += cell * nopt
    flat += opt
    if nsteps * ncell * nopt <= 4 * len(flat) + 1_000_000:
        dense = np.bincount(flat, minlength=nsteps * ncell * nopt)
        key = np.flatnonzero(dense)
        counts = dense[key]
    else:
        key, counts = np.unique(flat, return_counts=True)
    k_step, k_pair = key // (ncell * nopt), key % (ncell * nopt)

    def cell_name(c: int) -> str:
        return f"(dp_rank={c // meta.pp_size}, stage={c % meta.pp_size})"

    # 1. Whole workers missing from a step.
    sc = key // nopt  # (step, cell) ids; key is sorted, so dedupe neighbours in O(n)
    sc = sc[np.r_[True, sc[1:] != sc[:-1]]]
    cells_per_step = np.bincount(sc // ncell, minlength=nsteps)
    short = np.flatnonzero(cells_per_step < ncell)
    if len(short):
        parts = []
        for s in short[:SHOW]:
            have = sc[sc // ncell == s] % ncell
            lacking = np.setdiff1d(np.arange(ncell), have)
            names = ", ".join(cell_name(int(c)) for c in lacking[:4])
            extra = f" and {len(lacking) - 4} more" if len(lacking) > 4 else ""
            parts.append(f"step {fmt_value(steps[s])} has no rows for {names}{extra}")
        more = f" ({len(short) - SHOW} more steps like this)" if len(short) > SHOW else ""
        raise InputError(
            f"steps with missing workers: {'; '.join(parts)}{more}; every step must contain "
            "all dp_size*pp_size workers: drop incomplete steps (e.g. cut by the tracing "
            "window) or re-trace",
            path,
        )

    # 2. Same row count per (cell, optype) in every step. Expected = the most common
    # count over steps (absent = 0), ties to the larger count.
    npair = ncell * nopt
    present_in = np.bincount(k_pair, minlength=npair)
    used = np.flatnonzero(present_in > 0)
    if (present_in[used] == nsteps).all():
        # Every step holds every pair (keys sorted step-major): one row of counts per
        # step, and a complete trace's rows are all alike. O(keys), no sort.
        per_step = counts.reshape(nsteps, len(used))
        if (per_step == per_step[0]).all():
            expected = np.zeros(npair, dtype=np.int64)
            expected[used] = per_step[0]
            _check_dp_alike(expected, meta, path)
            return step_idx, steps
    absent = nsteps - present_in
    cand_pair = np.concatenate([k_pair, used])
    cand_count = np.concatenate([counts, np.zeros(len(used), dtype=counts.dtype)])
    ck, cfreq = np.unique(cand_pair * (counts.max() + 1) + cand_count, return_counts=True)
    c_pair, c_count = ck // (counts.max() + 1), ck % (counts.max() + 1)
    # The zero candidate's frequency is the number of steps the pair is absent from.
    cfreq = np.where(c_count == 0, absent[c_pair], cfreq)
    order = np.lexsort((c_count, cfreq, c_pair))  # last per pair = most frequent, then larger
    last = np.r_[c_pair[order][1:] != c_pair[order][:-1], True]
    expected = np.zeros(npair, dtype=np.int64)
    expected[c_pair[order][last]] = c_count[order][last]

    bad_present = np.flatnonzero(counts != expected[k_pair])
    bad_absent_pairs = used[(absent[used] > 0) & (expected[used] > 0)]
    total = len(bad_present) + int(absent[bad_absent_pairs].sum())
    if total == 0:
        _check_dp_alike(expected, meta, path)
        return step_idx, steps
    found = [(int(k_step[i]), int(k_pair[i]), int(counts[i])) for i in bad_present[:SHOW]]
    for p in bad_absent_pairs[:SHOW]:
        lacking = np.setdiff1d(np.arange(nsteps), k_step[k_pair == p])
        found += [(int(s), int(p), 0) for s in lacking[:SHOW]]
    found.sort()
    parts = [
        f"step {fmt_value(steps[s])} {cell_name(p // nopt)} has {n} '{OPTYPE_VALUES[p % nopt]}' "
        f"rows, expected {expected[p]}"
        for s, p, n in found[:SHOW]
    ]
    more = f" ({total - SHOW} more mismatches)" if total > SHOW else ""
    raise InputError(
        f"steps with missing or extra ops: {'; '.join(parts)}{more}; each worker must trace "
        "the same ops in every step (expected = the count in most steps): drop incomplete "
        "steps or fix the tracer",
        path,
    )


def _check_dp_alike(expected: np.ndarray, meta: JobMeta, path: str) -> None:
    """Every DP rank of a stage traces the same ops per step as DP rank 0 (the what-if
    takes one step's ops as the template of every DP replica): `expected` is the per-step
    row count of each (cell, optype), cells numbered dp_rank * pp_size + stage."""
    per = expected.reshape(meta.dp_size, meta.pp_size, len(OPTYPE_VALUES))
    differ = np.argwhere(per != per[0][None])
    if not len(differ):
        return
    d, st, o = (int(x) for x in differ[0])
    raise InputError(
        f"worker (dp_rank {d}, stage {st}) traces {int(per[d, st, o])} "
        f"'{OPTYPE_VALUES[o]}' op(s) per step where (dp_rank 0, stage {st}) traces "
        f"{int(per[0, st, o])} ({len(differ)} (worker, op type) pair(s) like it): every DP "
        "rank of a stage runs the same ops; trace them all alike (a range named otherwise "
        "on one rank is left out of the vocabulary)", path)


def _check_extra_columns(df: pd.DataFrame, path: str) -> dict[str, np.ndarray]:
    """The optional columns the analysis reads (schema.EXTRA_COLUMNS), where present: one
    number per row, finite and >= 0 (missing only where the column allows it); returns
    their values."""
    out = {}
    for col in EXTRA_COLUMNS:
        if col.name not in df.columns:
            continue
        values = (numeric_column(df, col.name, col.kind, path) if col.name in OPTIONAL_NAN
                  else check_column(df, col.name, col.kind, path))  # NaN refused too
        if values is None:  # plain ints, as stored
            values = df[col.name].to_numpy()
        _extra_in_range(df, values, col.name, path)
        out[col.name] = values
    return out


def _extra_in_range(src: pd.DataFrame | TraceTable, values: np.ndarray, name: str,
                    path: str) -> None:
    bad = np.isinf(values) | (values < 0)
    if bad.any():
        raise InputError(
            f"column '{name}' has infinite or negative values in "
            f"{rows_text(src, bad, name)}; write finite values >= 0 or drop the column",
            path,
        )


COARSEST_CLOCK_S = 1e-3
"""Coarsest start_ts resolution read: a float32 clock past ~16,000 s (epoch seconds: 128 s)
cannot order ops of a millisecond, and every check downstream would blame the ops."""


def _check_clock_resolution(start: np.ndarray, path: str) -> None:
    if start.dtype != np.float32 or not len(start):
        return
    top = max(float(np.nanmax(start)), -float(np.nanmin(start)))  # max |start|, no |.| copy
    step = float(np.spacing(np.float32(top)))
    if step > COARSEST_CLOCK_S:
        raise InputError(
            f"column 'start_ts' is float32 and reaches {top:.6g} s, where float32 resolves only "
            f"{step:g} s: ops of a millisecond cannot be told apart; store start_ts as float64, "
            "or as seconds from the job's start",
            path,
        )


GC_PAUSE_TOLERANCE_S = 1e-6
"""How far a row's gc_pause_s may exceed its duration (clock rounding): a pause counted
inside an op cannot be longer than the op (measured on 22 runs: never more than the op)."""


def _check_gc_inside(src: pd.DataFrame | TraceTable, gc: np.ndarray | None,
                     duration: np.ndarray, path: str) -> None:
    if gc is None:
        return
    over = (gc.astype(np.float64, copy=False)
            > duration.astype(np.float64, copy=False) + GC_PAUSE_TOLERANCE_S)
    if over.any():
        raise InputError(
            f"column 'gc_pause_s' exceeds the op's own duration in "
            f"{rows_text(src, over, 'gc_pause_s')}; it is the GC pause time inside the op's "
            "span, so at most the op's duration: fix the tracer or drop the column",
            path,
        )


def validate_trace(df: pd.DataFrame, meta: JobMeta, path: str) -> None:
    """Raise InputError(message, path) for the first problem found; None when the trace is fine.

    `df` may come straight from parquet or CSV (any int/float widths, optype as
    text or categorical). The optional columns the analysis reads (schema.EXTRA_COLUMNS)
    are checked where present; other extra columns are ignored.
    """
    meta.check(path)
    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(repr(c) for c in missing)}; a trace needs "
            f"{', '.join(COLUMN_NAMES)} (found: {', '.join(map(str, df.columns))}); "
            "add or rename these columns",
            path,
        )
    _not_empty(len(df), path)
    # Checked values of each column, converted once (text columns parsed, NA as NaN).
    values = {c.name: check_column(df, c.name, c.kind, path) for c in TRACE_COLUMNS}
    extras = _check_extra_columns(df, path)
    columns = {name: df[name].to_numpy() if v is None else v for name, v in values.items()
               if name != "optype"}
    # The frame's gc_pause_s as float64, as it always was read here.
    gc = (df["gc_pause_s"].to_numpy(dtype=np.float64) if "gc_pause_s" in extras else None)
    _check_arrays(columns, gc, lambda: _check_optypes(df, path), meta, path, df)


def validate_table(table: TraceTable, meta: JobMeta, path: str) -> None:
    """validate_trace's checks on a table of plain numpy columns (ints, floats, op-type
    codes: read_trace_table's); raises InputError for the first problem found."""
    meta.check(path)
    _not_empty(len(table), path)
    columns = {}
    for c in TRACE_COLUMNS:
        if c.kind == "category":
            continue
        v = table[c.name]
        if v.dtype.kind == "f":
            check_values(table, v, c.name, c.kind, path)
        columns[c.name] = v
    for col in EXTRA_COLUMNS:
        if col.name in table:
            v = table[col.name]
            if v.dtype.kind == "f" and col.name not in OPTIONAL_NAN:
                check_values(table, v, col.name, col.kind, path)
            _extra_in_range(table, v, col.name, path)

    def optypes() -> np.ndarray:
        codes = table.optype
        if (codes < 0).any():
            raise InputError(f"unknown optype value(s) in {rows_text(table, codes < 0)}; "
                             f"allowed: {', '.join(OPTYPE_VALUES)}; rename these ops or drop "
                             "the rows", path)
        return codes

    gc = table["gc_pause_s"] if "gc_pause_s" in table else None
    _check_arrays(columns, gc, optypes, meta, path, table)


def _not_empty(rows: int, path: str) -> None:
    if rows == 0:
        raise InputError(
            "the trace is empty (0 rows); re-run the traced job or point at a trace with "
            "at least one complete step",
            path,
        )


def _check_arrays(columns: dict[str, np.ndarray], gc: np.ndarray | None,
                  optypes: Callable[[], np.ndarray], meta: JobMeta, path: str,
                  src: pd.DataFrame | TraceTable) -> None:
    """Every check after the columns' own: `columns` the schema's numeric columns as
    arrays, `optypes` the op-type codes (or the error naming unknown ones), `src` what
    messages name rows from."""

    def rows(mask: np.ndarray, show: str | None) -> str:
        return rows_text(src, mask, show)

    _check_clock_resolution(columns["start_ts"], path)

    def ints(name: str) -> np.ndarray:
        return columns[name].astype(np.int64)

    negative = columns["duration"] < 0
    if negative.any():
        raise InputError(
            f"negative duration in {rows(negative, 'duration')}; durations are "
            "end - start in seconds and must be >= 0: fix the tracer's timestamps or drop "
            "these rows",
            path,
        )
    _check_gc_inside(src, gc, columns["duration"], path)
    opt = optypes()
    cell = _check_meta_ranges(src, ints("dp_rank"), ints("stage"), meta, path)
    _check_one_rank_per_worker(src, cell, ints("rank"), meta, path)
    step_idx, steps = _check_complete(cell, ints("step"), opt, meta, path)

    def floats(name: str) -> np.ndarray:  # a float column's values, float32 kept float32
        v = columns[name]
        return v if v.dtype in (np.float32, np.float64) else v.astype(np.float64)

    check_plausible(ints, floats, opt, cell, step_idx, steps, meta, path, rows)
