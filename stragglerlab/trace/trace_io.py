"""Read and write trace parquet files (ours and the OSDI'25 artifact's).

    from stragglerlab.trace.trace_io import read_trace, write_trace
    df, meta = read_trace("trace.parquet", "meta.yaml")   # meta_path optional for our traces
    write_trace(df, meta, "out/trace.parquet")

`read_trace` returns a validated DataFrame in one canonical form: the int
columns of stragglerlab.trace.schema as int64 (`compact_ints=True`: the narrowest of
int16/int32/int64 that holds each column, for traces of millions of rows), float columns
in their stored float
dtype (float32 stays float32: the what-if numbers depend on the exact stored
values), `optype` as a Categorical whose categories are exactly
schema.OPTYPE_VALUES, extra columns as stored. Bad files never give a
traceback, only an InputError naming the file, the problem and the fix.

Our own traces carry the job meta and the schema version in the parquet
key-value metadata (`stragglerlab.meta`, `stragglerlab.schema_version`); the
artifact's traces need the YAML meta beside them (`meta_path`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import EXTRA_COLUMNS, OPTYPE_VALUES, SCHEMA_VERSION, TRACE_COLUMNS
from stragglerlab.trace.validate import validate_trace
from stragglerlab.util.atomic import atomic_write
from stragglerlab.util.errors import InputError

META_KEY = b"stragglerlab.meta"
VERSION_KEY = b"stragglerlab.schema_version"
MAX_TRACE_ROWS = 200_000_000
"""Most rows read_trace loads (the benchmarked traces have 3.5M; 200M rows is ~20 GB)."""
MAX_TRACE_COLUMNS = 1_000
"""Most columns (schema columns plus extras) read_trace loads."""
_INT_COLUMNS = frozenset(c.name for c in TRACE_COLUMNS if c.kind == "int")
PANDAS_INDEX_COLUMN = re.compile(r"__index_level_\d+__")
"""Name pyarrow gives a stored unnamed pandas index: known by its name alone, so a frame
written with its index reads as the frame without trusting the file's pandas metadata."""


def frame_from_columns(table: pa.Table, **to_pandas: object) -> pd.DataFrame:
    """The frame of `table`'s columns alone (`to_pandas`: more of pyarrow's options).

    The b'pandas' metadata another writer stored (index columns, dtypes, column
    names) is dropped, not only ignored: pyarrow parses it even when told to ignore it,
    and a damaged one (`index_columns` a number, invalid JSON, columns of the wrong
    types) raised from inside the conversion or hid a real column as an index. A stored
    unnamed index (PANDAS_INDEX_COLUMN) is dropped; a named one stays a column."""
    keep = [i for i, n in enumerate(table.schema.names) if not PANDAS_INDEX_COLUMN.fullmatch(n)]
    if len(keep) < table.num_columns:
        table = table.select(keep)
    table = table.replace_schema_metadata(None)
    return table.to_pandas(ignore_metadata=True, **to_pandas)


def _open(path: str) -> pq.ParquetFile:
    """Open the parquet footer, turning every way a file can be wrong into an InputError."""
    p = Path(path)
    if not p.exists():
        if p.is_symlink():
            raise InputError("is a symbolic link that leads nowhere (its target is missing, "
                             "or it loops); point it at the trace's .parquet file", path)
        raise InputError("trace file does not exist; check the path", path)
    if p.is_dir():
        raise InputError("is a directory; pass the trace's .parquet file", path)
    if not p.is_file():  # parquet is read from its footer back: a pipe or device cannot be
        raise InputError("is not a regular file (a pipe or a device?); parquet is read from "
                         "its end, so save the trace to a file and pass that", path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise InputError(f"cannot read trace file: {e.strerror}", path) from None
    if size == 0:
        raise InputError(
            "trace file is empty (0 bytes), probably an interrupted write; "
            "re-run the step that produces it",
            path,
        )
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InputError(
            f"not a readable parquet file ({_short(e)}; its footer or its metadata, e.g. the "
            "arrow schema stored in it, is damaged); pass a trace .parquet written by "
            "stragglerlab or the OSDI'25 artifact",
            path,
        ) from None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _meta_from_file(pf: pq.ParquetFile, path: str) -> JobMeta:
    kv = pf.schema_arrow.metadata or {}
    raw = kv.get(META_KEY)
    if raw is None:
        raise InputError(
            "the trace carries no job meta (no 'stragglerlab.meta' parquet metadata, as in "
            "the artifact's traces); pass the job meta YAML with --meta META.yaml",
            path,
        )
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise InputError(
            f"the 'stragglerlab.meta' parquet metadata is not valid JSON "
            f"({type(e).__name__}: {str(e)[:80]}); "
            "pass the job meta YAML with --meta META.yaml",
            path,
        ) from None
    return JobMeta.from_dict(obj, path)


def _check_version(pf: pq.ParquetFile, path: str) -> None:
    raw = (pf.schema_arrow.metadata or {}).get(VERSION_KEY)
    if raw is not None and raw.decode(errors="replace") != SCHEMA_VERSION:
        raise InputError(
            f"trace schema version {raw.decode(errors='replace')!r} is not the version "
            f"{SCHEMA_VERSION!r} this stragglerlab reads; re-write the trace with a matching "
            "stragglerlab",
            path,
        )


def normalize_trace(df: pd.DataFrame, *, compact_ints: bool = False) -> pd.DataFrame:
    """Canonical dtypes for a *validated* trace (see the module doc); returns a new frame.
    `compact_ints`: each int column in the narrowest of int16, int32 and int64 that holds
    its values (a quarter to half the memory of int64), for callers that index and compare
    with them and widen before any product (the what-if's frame and graph)."""
    out = df.copy(deep=False)
    for col in TRACE_COLUMNS:
        s = out[col.name]
        if col.kind == "int":
            target = _int_width(s) if compact_ints else np.dtype(np.int64)
            if s.dtype != target:
                out[col.name] = (s if _is_numeric(s) else pd.to_numeric(s)).to_numpy(target)
        elif col.kind == "float":
            if isinstance(s.dtype, np.dtype) and s.dtype.kind == "f":
                continue  # stored float width kept: float32 stays float32
            if not _is_numeric(s):
                s = pd.to_numeric(s)
            # ints -> float64; nullable Float32/Float64 -> the plain numpy float.
            target = s.dtype.numpy_dtype if pd.api.types.is_float_dtype(s.dtype) else np.float64
            out[col.name] = s.to_numpy(dtype=target)
        elif isinstance(s.dtype, pd.CategoricalDtype):
            # Remaps codes only: cheap even for millions of rows.
            out[col.name] = s.cat.set_categories(list(OPTYPE_VALUES))
        else:
            out[col.name] = pd.Categorical(s, categories=list(OPTYPE_VALUES))
    return out


def _int_width(s: pd.Series) -> np.dtype:
    """The narrowest of int16, int32 and int64 that holds every value of the (validated,
    integral) column. Not int8: a stage or chunk number plus one stays in range."""
    v = s.to_numpy()
    if len(v) == 0:
        return np.dtype(np.int16)
    lo, hi = v.min(), v.max()
    for t in (np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def _is_numeric(s: pd.Series) -> bool:
    """True for int/float columns (not bool, not text)."""
    return pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype)


def read_trace(
    trace_path: str | Path, meta_path: str | Path | None = None, *, compact_ints: bool = False
) -> tuple[pd.DataFrame, JobMeta]:
    """Read, validate and normalize a trace; the meta comes from meta_path or the parquet.
    The numeric columns are read-only views of the file's data (no copy): edit a
    `df.copy()`. `compact_ints`: see normalize_trace (the int columns in half the memory).

    Raises InputError for a missing, empty, non-parquet or invalid trace, and
    for a trace without embedded meta when meta_path is None.
    """
    path = str(trace_path)
    pf = _open(path)
    _check_version(pf, path)
    meta = JobMeta.load(meta_path) if meta_path is not None else _meta_from_file(pf, path)
    # Skip a stored pandas index: row positions are what messages and analysis use.
    rows, ncols = pf.metadata.num_rows, len(pf.schema_arrow.names)
    if rows > MAX_TRACE_ROWS or ncols > MAX_TRACE_COLUMNS:
        raise InputError(
            f"the trace holds {rows:,} rows and {ncols:,} columns, over the limits of "
            f"{MAX_TRACE_ROWS:,} rows and {MAX_TRACE_COLUMNS:,} columns this reader loads; "
            "split the trace (e.g. fewer steps) or drop extra columns",
            path,
        )
    columns = [n for n in pf.schema_arrow.names if not PANDAS_INDEX_COLUMN.fullmatch(n)]
    try:
        table = pf.read(columns=columns, use_threads=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InputError(
            f"cannot read the parquet data ({_short(e)}); the file may be truncated or "
            "corrupt: re-create it",
            path,
        ) from None
    table = _arrow_types(table, path)
    # Stored pandas dtypes/index are not trusted; validation judges values.
    # self_destruct frees each arrow column once converted: halves the peak on big traces.
    df = frame_from_columns(table, split_blocks=True, self_destruct=True)
    del table
    # Arrow's allocator keeps the pages it decoded into (and those of the columns converted
    # away) for a next allocation that never comes: back to the system, before the checks.
    pa.default_memory_pool().release_unused()
    try:
        validate_trace(df, meta, path)
    except InputError as e:
        if meta_path is None or "job meta" not in str(e) or e.path != path:
            raise
        # A trace/meta contradiction: name the meta file too, either may be the wrong one.
        raise InputError(f"{str(e)[len(path) + 2:]} (job meta: {meta_path})", path) from None
    df = normalize_trace(df, compact_ints=compact_ints)
    pa.default_memory_pool().release_unused()  # the columns normalized away (see above)
    return df, meta


_COLUMNS = {c.name: c for c in (*TRACE_COLUMNS, *EXTRA_COLUMNS)}
"""The columns the reader checks: the schema's and the optional ones the analysis reads."""


def _as_written(name: str) -> str:
    col = _COLUMNS[name]
    return "integers" if col.kind == "int" else (
        "seconds (float)" if col.unit == "s" else f"numbers ({col.unit})")


def _arrow_types(table: pa.Table, path: str) -> pa.Table:
    """The schema columns in types the reader can judge by value, at the file's edge:
    ints kept at their stored width (the checks widen what they compute with; one copy of
    a narrow column is the frame's, not two), unsigned 64-bit ones to int64, decimals to
    float64; text,
    lists, structs, binary, a repeated column name or unsigned ints past int64 are one
    clear error each (pandas would turn them into objects no check expects)."""
    names = table.schema.names
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"column(s) {', '.join(map(repr, repeated))} appear more than once; "
                         "write each column once", path)
    for i, field in enumerate(table.schema):
        col, t = _COLUMNS.get(field.name), field.type
        if col is None:
            continue  # columns of nobody's: judged by whoever reads them
        kind = col.kind
        if kind in ("int", "float") and pa.types.is_decimal(t):
            table = table.set_column(i, field.name, table.column(i).cast(pa.float64()))
        elif kind in ("int", "float") and (pa.types.is_string(t) or pa.types.is_large_string(t)
                                           or pa.types.is_dictionary(t)):
            raise InputError(f"column {field.name!r} holds text ({t}), not numbers; write it "
                             f"as {_as_written(field.name)}", path)
        elif kind in ("int", "float") and (pa.types.is_nested(t) or pa.types.is_binary(t)
                                           or pa.types.is_large_binary(t)):
            raise InputError(f"column {field.name!r} holds {t} values, not one number per "
                             f"row; write it as {_as_written(field.name)}", path)
        elif field.name in _INT_COLUMNS and pa.types.is_uint64(t):  # extras keep theirs
            try:
                table = table.set_column(i, field.name, table.column(i).cast(pa.int64()))
            except pa.ArrowInvalid:
                raise InputError(f"column {field.name!r} holds {t} values beyond the int64 "
                                 f"range (> {np.iinfo(np.int64).max}); write it as int64",
                                 path) from None
        elif kind == "category" and not (pa.types.is_string(t) or pa.types.is_large_string(t)
                                         or pa.types.is_dictionary(t) or pa.types.is_null(t)):
            raise InputError(f"column {field.name!r} holds {t} values, not op type names; "
                             "write the op type as text", path)
    return table


def write_trace(df: pd.DataFrame, meta: JobMeta, path: str | Path) -> None:
    """Write df as parquet atomically, with the job meta and schema version embedded.

    optype is stored dictionary-encoded (a pandas Categorical); other columns
    keep their dtypes, so a read_trace round trip preserves every value. The
    frame is written as given: validate first if it may be bad.
    """
    out = df.copy(deep=False)
    if "optype" in out.columns and not isinstance(out["optype"].dtype, pd.CategoricalDtype):
        out["optype"] = out["optype"].astype("category")
    table = pa.Table.from_pandas(out, preserve_index=False)
    kv = dict(table.schema.metadata or {})
    kv[VERSION_KEY] = SCHEMA_VERSION.encode()
    kv[META_KEY] = json.dumps(meta.to_dict()).encode()
    table = table.replace_schema_metadata(kv)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
