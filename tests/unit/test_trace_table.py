"""read_trace_table: the what-if's reader gives read_trace's values, dtypes, meta and errors
(test_bad_input.py compares every error), and `stragglerlab whatif` runs without pandas."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglerlab.analysis.whatif import run_whatif
from stragglerlab.trace.schema import OPTYPE_VALUES
from stragglerlab.trace.trace_io import read_trace, read_trace_table, write_trace
from stragglerlab.trace.trace_table import TraceTable
from stragglerlab.util.errors import InputError
from tests.unit.refdata import DIFFERENTIAL, differential_cases, reference


def _same(path, meta_path=None) -> TraceTable:
    """Both readers on one file, at both int widths: the same columns, values and dtypes."""
    for compact in (False, True):
        df, meta = read_trace(path, meta_path, compact_ints=compact)
        table, table_meta = read_trace_table(path, meta_path, compact_ints=compact)
        assert table_meta == meta
        frame = TraceTable.of(df)
        assert table.names == frame.names == list(df.columns)
        for name in frame.names:
            a, b = frame[name], table[name]
            assert a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=name)
    return table


@pytest.mark.parametrize("job", ["ST", "AR"])
def test_reference_traces_read_alike(job):
    _same(reference(f"trace-{job}.parquet"), reference(f"meta-{job}.yaml"))


@pytest.mark.parametrize("case", differential_cases())
def test_differential_traces_read_alike(case):
    _same(DIFFERENTIAL / case / "trace.parquet")


def test_narrow_types_extras_nulls_text_optypes_and_row_groups(tmp_path, tiny_df, tiny_meta):
    """float32 times, int8 ids, the extra columns (seq_len_sq_sum with nulls), op types as
    plain text and the table in several row groups: the plain path, read alike."""
    src = tiny_df.astype({"start_ts": np.float32, "duration": np.float32, "stage": np.int8})
    src["tp_rank"] = np.zeros(len(src), dtype=np.int16)
    src["seq_len_sq_sum"] = np.where(np.arange(len(src)) % 3, 2.5, np.nan)
    src["gc_pause_s"] = np.zeros(len(src))
    path = tmp_path / "t.parquet"
    write_trace(src, tiny_meta, path)
    table = pq.read_table(path)
    text = table.set_column(table.schema.get_field_index("optype"), "optype",
                            table.column("optype").cast(pa.string()))
    pq.write_table(text, path, row_group_size=37)
    table = _same(path)
    assert np.isnan(table["seq_len_sq_sum"][0]) and table["seq_len_sq_sum"][1] == 2.5
    assert [OPTYPE_VALUES[c] for c in table.optype[:5]] == list(tiny_df["optype"][:5])


def test_columns_pandas_must_parse_take_read_traces_way(tmp_path, tiny_df, tiny_meta):
    """Integral floats in an int column, unsigned ids, an extra text column: read_trace's
    parsing, the same table."""
    src = tiny_df.astype({"mb_id": float, "dp_rank": np.uint16})
    src["note"] = "x"
    path = tmp_path / "t.parquet"
    write_trace(src, tiny_meta, path)
    table = _same(path)
    assert table["mb_id"].dtype.kind == "i" and table["note"][0] == "x"


def test_a_plain_file_with_bad_values_is_refused_alike(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[3, "seq_id"] = 40
    path = tmp_path / "t.parquet"
    write_trace(df, tiny_meta, path)
    with pytest.raises(InputError) as frame_exc:
        read_trace(path)
    with pytest.raises(InputError) as table_exc:
        read_trace_table(path)
    assert str(table_exc.value) == str(frame_exc.value)


def test_table_and_frame_convert_both_ways(tiny_parquet):
    df, _ = read_trace(tiny_parquet)
    table = TraceTable.of(df)
    assert TraceTable.of(table) is table
    back = table.to_frame()
    pd.testing.assert_frame_equal(back, df, check_dtype=True)
    rows = table.rows(table["dp_rank"] == 1)
    assert len(rows) == int((df["dp_rank"] == 1).sum())
    assert rows.value("optype", 0) == df.loc[df["dp_rank"] == 1, "optype"].iloc[0]


def test_whatif_of_a_table_is_the_frames():
    path, meta_path = reference("trace-ST.parquet"), reference("meta-ST.yaml")
    df, meta = read_trace(path, meta_path, compact_ints=True)
    table, _ = read_trace_table(path, meta_path, compact_ints=True)
    a = run_whatif(df, meta, str(path)).result.to_json()
    b = run_whatif(table, meta, str(path)).result.to_json()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_whatif_process_imports_no_pandas(tmp_path):
    """The verb the workflow runs on every trace starts in a third less time without it."""
    code = (
        "import sys\n"
        "from stragglerlab.cli import main\n"
        f"sys.argv = ['stragglerlab', 'whatif', '--trace', {str(reference('trace-ST.parquet'))!r},"
        f" '--meta', {str(reference('meta-ST.yaml'))!r}, '--out', {str(tmp_path / 'w')!r},"
        " '--quiet']\n"
        "rc = main()\n"
        "print('pandas' in sys.modules, rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout.splitlines()
    assert out[-1] == "False 0"
    assert json.loads((tmp_path / "w" / "whatif.json").read_text())["slowdown"] > 1


def _set(name, make):
    return lambda t: t.set_column(t.schema.get_field_index(name), name, make(t.column(name)))


def _first_null(kind):
    return lambda c: pa.chunked_array([pa.array([None] + c.cast(kind).to_pylist()[1:], kind)])


FILE_KINDS = {
    "float16 duration": _set("duration", lambda c: c.cast(pa.float16())),
    "large_string optype": _set("optype", lambda c: c.cast(pa.string()).cast(pa.large_string())),
    "int32-indexed optype": _set("optype", lambda c: c.cast(pa.string()).dictionary_encode()
                                 .cast(pa.dictionary(pa.int32(), pa.string()))),
    "int8 step": _set("step", lambda c: c.cast(pa.int8())),
    "uint8 stage": _set("stage", lambda c: c.cast(pa.uint8())),
    "a null start": _set("start_ts", _first_null(pa.float64())),
    "a null optype": _set("optype", _first_null(pa.string())),
    "timestamps for start": _set("start_ts", lambda c: pa.chunked_array(
        [pa.array(np.arange(len(c)).astype("datetime64[s]"))])),
    "bool mc": _set("mc", lambda c: pa.chunked_array([pa.array(np.zeros(len(c), bool))])),
    "one rank for all": _set("rank", lambda c: pa.chunked_array(
        [pa.array(np.full(len(c), 2**40, np.int64))])),
    "a struct column": lambda t: t.append_column("blob", pa.array([{"a": 1}] * len(t))),
    "a null gc pause": lambda t: t.append_column(
        "gc_pause_s", pa.array([None] + [0.0] * (len(t) - 1), pa.float64())),
    "a null seq_len_sq_sum": lambda t: t.append_column(
        "seq_len_sq_sum", pa.array([None] + [1.0] * (len(t) - 1), pa.float64())),
    "tp_rank as float": lambda t: t.append_column("tp_rank", pa.array([0.0] * len(t))),
    "two row groups": lambda t: pa.concat_tables([t.slice(0, 50), t.slice(50)]),
    "no rows": lambda t: t.slice(0, 0),
}


@pytest.mark.parametrize("kind", sorted(FILE_KINDS))
def test_files_other_writers_make_read_alike(kind, tmp_path, tiny_parquet):
    """Kinds of file another tool writes: both readers give the same table or the same
    one-line error."""
    path = tmp_path / "v.parquet"
    pq.write_table(FILE_KINDS[kind](pq.read_table(tiny_parquet)), path)
    answers = []
    for reader in (read_trace, read_trace_table):
        try:
            table = TraceTable.of(reader(path)[0])
            answers.append({c: (table[c].dtype.str, table[c].tolist() if table[c].dtype == object
                                else table[c].tobytes()) for c in table.names})
        except InputError as e:
            answers.append(str(e))
    assert answers[0] == answers[1]
