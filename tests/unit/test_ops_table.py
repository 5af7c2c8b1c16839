"""ops.parquet read back (stragglerlab.trace.ops_table): the importer's contract holds, or one
clear error names the broken rule (found by a fuzz: NaN, negative and absurd S before)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.trace.op_model import OP_COLUMNS
from stragglerlab.trace.ops_table import read_ops
from stragglerlab.util.errors import InputError


def _table() -> pd.DataFrame:
    """Two ranks, two steps: an all_reduce (group per step) and the step-end row."""
    rows = []
    for step in (0, 1):
        t0 = step * 1.0
        for rank, arrive in ((0, 0.30), (1, 0.35)):
            start, end = t0 + arrive, t0 + 0.40
            rows.append({"rank": rank, "step": step, "k": 0, "kind": "all_reduce", "pg": "0",
                         "group": step, "start_s": start, "end_s": end, "gap_s": arrive,
                         "transfer_s": 0.05, "busy_s": np.nan})
            rows.append({"rank": rank, "step": step, "k": 1, "kind": "step-end", "pg": "",
                         "group": -1, "start_s": t0 + 0.5, "end_s": t0 + 0.5,
                         "gap_s": 0.1, "transfer_s": 0.0, "busy_s": np.nan})
    df = pd.DataFrame(rows)
    for col in ("in_nelems", "out_nelems", "peer", "dp_rank", "stage"):
        df[col] = -1
    df["role"] = 0
    return df[list(OP_COLUMNS)]


def _write(tmp_path, df: pd.DataFrame):
    path = tmp_path / "ops.parquet"
    df.to_parquet(path, index=False)
    return path


def test_a_table_as_the_importer_writes_it_reads_back(tmp_path):
    ops = read_ops(_write(tmp_path, _table()), again="re-import")
    assert len(ops) == 8 and list(ops["k"][:2]) == [0, 1]
    assert (ops["wait_k"] == -1).all()  # a table without the column: nothing posted


def test_a_posted_row_reads_back_with_its_waiting_row(tmp_path):
    # the all_reduce rows are posted and waited for by the step end (k 1): its gap is
    # measured from their end, as the importer writes it
    df = _table().assign(**{"async": lambda d: d["k"] == 0,
                            "wait_k": lambda d: np.where(d["k"] == 0, 1, -1)})
    ops = read_ops(_write(tmp_path, df), again="re-import")
    assert ops.loc[ops["k"] == 0, "wait_k"].tolist() == [1] * 4


def _set(col, value, rows=slice(None)):
    def edit(df):
        df.loc[df.index[rows], col] = value
        return df
    return edit


BROKEN = {
    "no rows": (lambda df: df.iloc[:0], "holds no ops"),
    "a column dropped": (lambda df: df.drop(columns=["gap_s"]), "lacks column(s) gap_s"),
    "an infinite gap": (_set("gap_s", np.inf), "'gap_s' holds values that are not finite"),
    "a NaN transfer": (_set("transfer_s", np.nan, slice(0, 1)), "'transfer_s'"),
    "steps as text": (lambda df: df.assign(step=df["step"].astype(str)), "'step' holds"),
    "negative busy time": (_set("busy_s", -1.0), "'busy_s'"),
    "one rank": (lambda df: df[df["rank"] == 0], "holds one rank"),
    "a repeated position": (_set("k", 0), "holds two rows at rank 0, step 0"),
    "ends before it starts": (_set("end_s", 0.0, slice(0, 1)), "ends before it starts"),
    "a transfer past its op": (_set("transfer_s", 100.0, slice(0, 1)), "transfer_s outside"),
    "a negated gap": (lambda df: df.assign(gap_s=-df["gap_s"]), "gap_s that is not"),
    "no step-end": (lambda df: df[df["kind"] != "step-end"], "does not end with one"),
    "a group of two kinds": (_set("kind", "broadcast", slice(0, 1)), "not one collective"),
    "a group of one": (_set("group", 7, slice(0, 1)), "with one member"),
    "a huge rank": (_set("rank", 1 << 30, slice(0, 2)), "outside 0.."),
    "wait_k as floats": (lambda df: df.assign(wait_k=-1.0), "'wait_k' holds float64"),
    "a posted row waited for by itself": (
        lambda df: df.assign(**{"async": df["k"] == 0, "wait_k": np.where(df["k"] == 0, 0, -1)}),
        "whose wait_k is not a later position"),
    "a posted row waited for past its chain": (
        lambda df: df.assign(**{"async": df["k"] == 0, "wait_k": np.where(df["k"] == 0, 5, -1)}),
        "whose wait_k is not a later position"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_table_is_one_clear_error(tmp_path, case):
    edit, says = BROKEN[case]
    with pytest.raises(InputError) as err:
        read_ops(_write(tmp_path, edit(_table().copy())), again="re-import the traces")
    assert says in str(err.value) and "re-import the traces" in str(err.value)


def test_a_file_that_is_not_parquet_is_one_clear_error(tmp_path):
    path = tmp_path / "ops.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="cannot be read"):
        read_ops(path, again="re-import")
