"""One trace column at a time: its values parsed and checked (numeric, finite, whole where an
int) and the offending rows named in a message (stragglerlab.trace.validate runs these first).

    values = check_column(df, "duration", "float", "trace.parquet")   # or InputError

A DataFrame's columns are parsed here (pandas, imported when a frame is given); a
TraceTable's are numpy arrays already, and `check_values` judges them the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.trace.trace_table import TraceTable
from stragglerlab.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

SHOW = 3  # how many offending rows / steps a message lists
_CONTEXT = ("step", "dp_rank", "stage")


def fmt_value(value: object) -> str:
    """A value as a user would write it: numbers plain, text quoted."""
    value = value.item() if isinstance(value, np.generic) else value
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


def rows_text(df: pd.DataFrame | TraceTable, mask: np.ndarray, show: str | None = None) -> str:
    """'N rows, e.g. row 4 (step=1, dp_rank=0, stage=1, duration=-0.5), ...'."""
    positions = np.flatnonzero(mask)
    parts = []
    table = isinstance(df, TraceTable)
    for i in positions[:SHOW]:
        cols = [c for c in _CONTEXT if (c in df if table else c in df.columns)]
        if show is not None and show not in cols:
            cols.append(show)
        ctx = ", ".join(f"{c}={fmt_value(df.value(c, i) if table else df[c].iat[i])}"
                        for c in cols)
        parts.append(f"row {i} ({ctx})")
    more = f" and {len(positions) - SHOW} more" if len(positions) > SHOW else ""
    noun = "row" if len(positions) == 1 else "rows"
    return f"{len(positions)} {noun}, e.g. " + ", ".join(parts) + more


def numeric_column(df: pd.DataFrame, name: str, kind: str, path: str) -> np.ndarray | None:
    """The column as a float array (NaN for missing), None when it is a plain int column.

    Raises InputError when the column is not numeric.
    """
    import pandas as pd  # a frame is given: pandas is loaded
    from pandas.api import types as ptypes

    s = df[name]
    want = "integers" if kind == "int" else "numbers (seconds)"
    if ptypes.is_datetime64_any_dtype(s.dtype) or ptypes.is_timedelta64_dtype(s.dtype):
        raise InputError(
            f"column '{name}' holds {s.dtype} values, not {want}; write "
            f"{'seconds as floats (e.g. Unix time)' if kind == 'float' else want} in this "
            "column",
            path,
        )
    if ptypes.is_bool_dtype(s.dtype):
        raise InputError(
            f"column '{name}' must hold {want} but has dtype bool; write {want} in this column",
            path,
        )
    if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iu":
        return None  # numpy ints: no NaN, nothing fractional, nothing to check
    if isinstance(s.dtype, np.dtype) and s.dtype.kind == "f":
        return s.to_numpy()  # keep float32 as is: no copy, exact values
    if ptypes.is_integer_dtype(s.dtype) or ptypes.is_float_dtype(s.dtype):
        # Nullable extension dtypes (Int64, Float32, ...): NA becomes NaN.
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    # Text or mixed objects (e.g. a CSV column with a stray word): find what does not parse.
    coerced = pd.to_numeric(s, errors="coerce")
    bad = (coerced.isna() & s.notna()).to_numpy()
    if bad.any() or not ptypes.is_numeric_dtype(coerced.dtype):
        examples = ", ".join(fmt_value(v) for v in pd.unique(s[bad])[:SHOW])
        raise InputError(
            f"column '{name}' must hold {want} but has dtype {s.dtype} with non-numeric "
            f"values ({examples}) in {rows_text(df, bad, name)}; write {want} in this column",
            path,
        )
    return coerced.to_numpy(dtype=np.float64, na_value=np.nan)


def check_column(df: pd.DataFrame, name: str, kind: str, path: str) -> np.ndarray | None:
    """dtype and NaN check of one schema column; returns its numeric values (None: as stored)."""
    if kind == "category":
        missing = df[name].isna().to_numpy()
        if missing.any():
            raise InputError(
                f"column '{name}' has missing values (NaN/None) in {rows_text(df, missing)}; "
                "every row needs an optype: fill it in or drop these rows",
                path,
            )
        return None
    values = numeric_column(df, name, kind, path)
    if values is None:
        return None
    check_values(df, values, name, kind, path)
    return values


def check_values(src: pd.DataFrame | TraceTable, values: np.ndarray, name: str, kind: str,
                 path: str) -> None:
    """A numeric schema column's values (`src`'s, named in the messages): finite, and whole
    and within +-2**62 where an int."""
    for bad, what in (
        (np.isnan(values), "missing values (NaN)"),
        (np.isinf(values), "infinite values"),
    ):
        if bad.any():
            raise InputError(
                f"column '{name}' has {what} in {rows_text(src, bad, name)}; every row needs a "
                "finite value in each schema column: fill them in or drop these rows",
                path,
            )
    if kind == "int":
        frac = values != np.floor(values)
        if frac.any():
            raise InputError(
                f"column '{name}' must hold integers but has non-integral values in "
                f"{rows_text(src, frac, name)}; write whole numbers in this column",
                path,
            )
        huge = np.abs(values) > 2.0**62
        if huge.any():
            raise InputError(
                f"column '{name}' has values beyond +-2**62 in {rows_text(src, huge, name)}; "
                "these cannot be ids or step numbers: fix the tracer or drop these rows",
                path,
            )
