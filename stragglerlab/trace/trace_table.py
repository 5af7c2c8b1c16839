"""A trace as numpy columns: the what-if's input, read with no pandas in the process.

    from stragglerlab.trace.trace_io import read_trace_table
    table, meta = read_trace_table("trace.parquet", compact_ints=True)
    table["start_ts"]        # np.ndarray at its stored width (float32 stays float32)
    table.optype             # int8 codes into schema.OPTYPE_VALUES
    TraceTable.of(df)        # read_trace's DataFrame as the same arrays (views, no copy)

`read_trace`'s DataFrame stays the trace's type everywhere else; the what-if reads
columns and op-type codes only, and importing pandas is about a quarter of a second of
every `stragglerlab whatif` process. One table per trace, read-only by convention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.trace.schema import OPTYPE_VALUES

if TYPE_CHECKING:
    import pandas as pd

_OPTYPE_NAMES = np.array(OPTYPE_VALUES, dtype=object)


@dataclass(frozen=True)
class TraceTable:
    """A trace's columns by name, each a numpy array of one row per op."""

    columns: Mapping[str, np.ndarray]
    """The schema's columns (ints at the reader's width, floats as stored) and the extra
    columns as stored; `optype` as int8 codes into OPTYPE_VALUES (-1: not an op type)."""

    def __len__(self) -> int:
        return len(self.columns["optype"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    @property
    def names(self) -> list[str]:
        """Column names, in the file's order."""
        return list(self.columns)

    @property
    def optype(self) -> np.ndarray:
        """Each row's op type as its index in OPTYPE_VALUES (int8)."""
        return self.columns["optype"]

    def optype_names(self) -> np.ndarray:
        """Each row's op type name (object array of str)."""
        return _OPTYPE_NAMES[self.optype]

    def value(self, name: str, row: int) -> object:
        """One cell as a user would read it (the op type by name)."""
        if name == "optype":
            code = int(self.optype[row])
            return OPTYPE_VALUES[code] if code >= 0 else None
        return self.columns[name][row]

    def rows(self, mask: np.ndarray) -> TraceTable:
        """The rows where `mask` holds (or at those positions), every column."""
        return TraceTable({k: v[mask] for k, v in self.columns.items()})

    @classmethod
    def of(cls, trace: pd.DataFrame | TraceTable) -> TraceTable:
        """A table of a trace DataFrame (as read_trace gives it, or any frame with the
        schema's columns): its numeric columns as views, its op types as codes."""
        if isinstance(trace, TraceTable):
            return trace
        columns = {str(c): trace[c].to_numpy() for c in trace.columns if c != "optype"}
        columns["optype"] = optype_codes(trace["optype"])
        return cls({str(c): columns[str(c)] for c in trace.columns})

    def to_frame(self) -> pd.DataFrame:
        """The DataFrame read_trace would give for this table (optype a Categorical of
        OPTYPE_VALUES); imports pandas."""
        import pandas as pd

        data = {k: (pd.Categorical.from_codes(v, categories=list(OPTYPE_VALUES))
                    if k == "optype" else v) for k, v in self.columns.items()}
        return pd.DataFrame(data, copy=False)


def optype_codes(s: pd.Series) -> np.ndarray:
    """Index of each value in OPTYPE_VALUES (int8), -1 where unknown or missing (vectorized)."""
    import pandas as pd  # a Series is given: pandas is loaded

    if isinstance(s.dtype, pd.CategoricalDtype):
        # Map the (few) categories, then the per-row codes through that map.
        cat_map = names_codes([*s.cat.categories, None])
        return cat_map[s.cat.codes.to_numpy()]  # code -1 (NaN) picks the trailing -1
    return pd.Categorical(s, categories=list(OPTYPE_VALUES)).codes.astype(np.int8)


def names_codes(names) -> np.ndarray:
    """Index in OPTYPE_VALUES (int8) of each of a few names (a dictionary's), -1 where none."""
    lookup = {v: i for i, v in enumerate(OPTYPE_VALUES)}
    return np.array([lookup.get(n, -1) for n in names], dtype=np.int8)
