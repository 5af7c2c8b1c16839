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

`read_trace_table` reads the same file into a TraceTable (numpy columns, op types as
codes) without pandas where every schema column is stored plainly (ints, floats, op
types as text, no nulls: what stragglerlab and the artifact write), and through
read_trace otherwise: the same checks, the same errors, the same values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import (
    EXTRA_COLUMNS,
    OPTIONAL_NAN,
    OPTYPE_VALUES,
    SCHEMA_VERSION,
    TRACE_COLUMNS,
)
from stragglerlab.trace.trace_table import TraceTable, names_codes
from stragglerlab.trace.validate import validate_table, validate_trace

if TYPE_CHECKING:
    import pandas as pd
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
    import pandas as pd  # a frame is given: pandas is loaded

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


def _int_width(s: pd.Series | np.ndarray) -> np.dtype:
    """The narrowest of int16, int32 and int64 that holds every value of the (validated,
    integral) column. Not int8: a stage or chunk number plus one stays in range."""
    v = s if isinstance(s, np.ndarray) else s.to_numpy()
    if len(v) == 0:
        return np.dtype(np.int16)
    lo, hi = v.min(), v.max()
    for t in (np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def _is_numeric(s: pd.Series) -> bool:
    """True for int/float columns (not bool, not text)."""
    import pandas as pd

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
    table, meta = _read_table(path, meta_path)
    # Stored pandas dtypes/index are not trusted; validation judges values.
    # self_destruct frees each arrow column once converted: halves the peak on big traces.
    df = frame_from_columns(table, split_blocks=True, self_destruct=True)
    del table
    # Arrow's allocator keeps the pages it decoded into (and those of the columns converted
    # away) for a next allocation that never comes: back to the system, before the checks.
    pa.default_memory_pool().release_unused()
    with _naming_meta(path, meta_path):
        validate_trace(df, meta, path)
    df = normalize_trace(df, compact_ints=compact_ints)
    pa.default_memory_pool().release_unused()  # the columns normalized away (see above)
    return df, meta


def read_trace_table(
    trace_path: str | Path, meta_path: str | Path | None = None, *, compact_ints: bool = False
) -> tuple[TraceTable, JobMeta]:
    """read_trace's trace as a TraceTable (module doc): the same file checks, the same
    validation and the same column values (`compact_ints` likewise), with no pandas
    where the file stores its schema columns plainly."""
    path = str(trace_path)
    table, meta = _read_table(path, meta_path)
    held = [table]  # handed over: each column is let go as it is converted
    del table
    columns = _plain_columns(held)
    if columns is None:  # a column pandas must parse first: read_trace's way, its errors
        df, meta = read_trace(trace_path, meta_path, compact_ints=compact_ints)
        return TraceTable.of(df), meta
    # Arrow's allocator keeps the pages it decoded into (read_trace's note): back to the
    # system before the checks.
    pa.default_memory_pool().release_unused()
    with _naming_meta(path, meta_path):
        validate_table(TraceTable(columns), meta, path)
    for col in TRACE_COLUMNS:  # normalize_trace's dtypes
        if col.kind == "int":
            v = columns[col.name]
            target = _int_width(v) if compact_ints else np.dtype(np.int64)
            if v.dtype != target:
                columns[col.name] = v.astype(target)
    pa.default_memory_pool().release_unused()
    return TraceTable(columns), meta


def _read_table(path: str, meta_path: str | Path | None) -> tuple[pa.Table, JobMeta]:
    """The file's checks (readable parquet, schema version, meta, size) and its columns in
    the types the reader judges by value (_arrow_types)."""
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
    return _arrow_types(table, path), meta


class _naming_meta:
    """A trace/meta contradiction names the meta file too: either may be the wrong one."""

    def __init__(self, path: str, meta_path: str | Path | None) -> None:
        self.path, self.meta_path = path, meta_path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, e, tb) -> bool:
        if not isinstance(e, InputError) or self.meta_path is None or \
                "job meta" not in str(e) or e.path != self.path:
            return False
        raise InputError(f"{str(e)[len(self.path) + 2:]} (job meta: {self.meta_path})",
                         self.path) from None


def _plain_columns(held: list[pa.Table]) -> dict[str, np.ndarray] | None:
    """The table's columns as numpy arrays, op types as codes into OPTYPE_VALUES, when
    every schema column is present, non-empty and stored plainly (ints and floats of
    numpy's kinds, op types as text known to the schema, no nulls) and the optional ones
    the analysis reads likewise; None otherwise (read_trace parses and judges it).
    `held` hands the table over: a column stored in several row groups is copied into one
    array, and its arrow chunks are freed as that is made, not at the end (the peak of a
    trace of millions of rows)."""
    table = held.pop()
    names = table.schema.names
    if table.num_rows == 0 or any(c.name not in names for c in TRACE_COLUMNS):
        return None
    out: dict[str, np.ndarray] = {}
    for field in table.schema:
        col, t = table.column(0), field.type
        table = table.remove_column(0)
        if field.name == "optype":
            codes = _optype_codes(col)
            if codes is None:
                return None
            out["optype"] = codes
            continue
        if field.name in _COLUMNS:
            kind = _COLUMNS[field.name].kind
            plain = (pa.types.is_signed_integer(t) if kind == "int" else
                     pa.types.is_float32(t) or pa.types.is_float64(t))
            # A null reads as NaN: allowed only where NaN means "none for this op".
            if not plain or (col.null_count and not (
                    field.name in OPTIONAL_NAN and kind == "float")):
                return None
        values = _numpy(col)
        if values is None:  # a column of another's, not of numbers: the frame's reader
            return None
        out[field.name] = values
    return out


_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32,
          pa.int64(): np.int64, pa.float32(): np.float32, pa.float64(): np.float64}
"""Arrow's fixed-width number types and their numpy dtypes."""


def _numpy(col: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A column of fixed-width numbers as a numpy array over its buffers (a read-only view
    of one chunk; pyarrow's own conversions import pandas); nulls as NaN in a float
    column; None for any other type or nulls elsewhere."""
    dtype = _NUMPY.get(col.type)
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    parts = []
    for chunk in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        if not len(chunk):
            continue
        validity, data = chunk.buffers()[:2]
        values = np.frombuffer(data, dtype=dtype, count=len(chunk),
                               offset=chunk.offset * dtype.itemsize)
        if chunk.null_count:
            if dtype.kind != "f":
                return None
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            values = values.copy()
            values[~bits[chunk.offset:chunk.offset + len(chunk)].astype(bool)] = np.nan
        parts.append(values)
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _optype_codes(col: pa.ChunkedArray) -> np.ndarray | None:
    """Op-type codes of a text or dictionary column with no nulls, every name known; None
    otherwise."""
    if col.null_count:
        return None
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        chunks = [col.combine_chunks().dictionary_encode()]
    elif pa.types.is_dictionary(col.type):
        chunks = col.chunks
    else:
        return None
    parts = []
    for chunk in chunks:
        lookup = names_codes(np.asarray(chunk.dictionary.to_pylist(), dtype=object))
        indices = _numpy(chunk.indices)
        if indices is None or (lookup < 0).any():
            return None
        parts.append(lookup[indices])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int8)


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
    import pandas as pd  # a frame is given: pandas is loaded

    out = df.copy(deep=False)
    if "optype" in out.columns and not isinstance(out["optype"].dtype, pd.CategoricalDtype):
        out["optype"] = out["optype"].astype("category")
    table = pa.Table.from_pandas(out, preserve_index=False)
    kv = dict(table.schema.metadata or {})
    kv[VERSION_KEY] = SCHEMA_VERSION.encode()
    kv[META_KEY] = json.dumps(meta.to_dict()).encode()
    table = table.replace_schema_metadata(kv)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
