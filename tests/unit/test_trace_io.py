"""read_trace / write_trace: round trips, canonical dtypes, and the artifact's reference traces."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import COLUMN_NAMES, OPTYPE_VALUES, SCHEMA_VERSION, TRACE_COLUMNS
from stragglerlab.trace.trace_io import read_trace, write_trace
from stragglerlab.trace.validate import validate_trace
from stragglerlab.util.errors import InputError
from tests.unit.refdata import reference

INT_COLUMNS = [c.name for c in TRACE_COLUMNS if c.kind == "int"]


def _assert_canonical(df: pd.DataFrame) -> None:
    for name in INT_COLUMNS:
        assert df[name].dtype == np.int64, name
    assert isinstance(df["optype"].dtype, pd.CategoricalDtype)
    assert list(df["optype"].cat.categories) == list(OPTYPE_VALUES)


def test_tiny_csv_is_valid(tiny_df, tiny_meta):
    validate_trace(tiny_df, tiny_meta, "tiny_trace.csv")
    assert len(tiny_df) == 120
    assert set(tiny_df["optype"]) == set(OPTYPE_VALUES) - {"separate-grads-all-reduce", "first-op"}


def test_round_trip_preserves_values(tiny_parquet, tiny_df, tiny_meta):
    df, meta = read_trace(tiny_parquet)
    assert meta == tiny_meta
    _assert_canonical(df)
    assert list(df.columns) == list(tiny_df.columns)
    for name in COLUMN_NAMES:
        if name == "optype":
            assert (df[name].astype(str).to_numpy() == tiny_df[name].to_numpy()).all()
        else:
            np.testing.assert_array_equal(df[name].to_numpy(), tiny_df[name].to_numpy())
    assert df["start_ts"].dtype == np.float64


def test_round_trip_keeps_float32_exact_and_extra_columns(tmp_path, tiny_df, tiny_meta):
    src = tiny_df.astype({"start_ts": np.float32, "duration": np.float32, "stage": np.int8})
    src["tp_rank"] = np.zeros(len(src), dtype=np.int16)
    src["seq_len_sq_sum"] = np.arange(len(src), dtype=np.float64)
    path = tmp_path / "t32.parquet"
    write_trace(src, tiny_meta, path)
    df, _ = read_trace(path)
    _assert_canonical(df)
    assert df["start_ts"].dtype == np.float32 and df["duration"].dtype == np.float32
    # Bit-exact: no detour through float64 and back.
    assert df["start_ts"].to_numpy().tobytes() == src["start_ts"].to_numpy().tobytes()
    assert df["tp_rank"].dtype == np.int16
    np.testing.assert_array_equal(df["seq_len_sq_sum"], src["seq_len_sq_sum"])


def test_write_trace_metadata_and_dictionary_optype(tiny_parquet, tiny_meta):
    schema = pq.read_schema(tiny_parquet)
    kv = schema.metadata
    assert kv[b"stragglerlab.schema_version"].decode() == SCHEMA_VERSION
    assert JobMeta.from_dict(json.loads(kv[b"stragglerlab.meta"])) == tiny_meta
    assert pa.types.is_dictionary(schema.field("optype").type)
    # Atomic write leaves no temporary files behind.
    assert [p.name for p in tiny_parquet.parent.iterdir()] == ["trace.parquet"]


def test_meta_path_overrides_embedded(tmp_path, tiny_parquet, tiny_meta):
    meta_file = tmp_path / "meta.yaml"
    JobMeta(dp_size=2, pp_size=2, trial_name="other").dump(meta_file)
    _, meta = read_trace(tiny_parquet, meta_file)
    assert meta.trial_name == "other"


def test_plain_string_optype_and_stored_index(tmp_path, tiny_df, tiny_meta):
    # A pandas-written file: optype as plain strings, a non-range index stored as a column.
    path = tmp_path / "plain.parquet"
    tiny_df.set_index(pd.Index(np.arange(len(tiny_df)) * 10, name="idx")).to_parquet(path)
    meta_file = tmp_path / "meta.yaml"
    tiny_meta.dump(meta_file)
    df, _ = read_trace(path, meta_file)
    _assert_canonical(df)
    assert "idx" not in df.columns and isinstance(df.index, pd.RangeIndex)


@pytest.mark.parametrize("name, rows, dp, pp", [("AR", 117216, 4, 4), ("ST", 6784, 2, 4)])
def test_reference_traces_load_unchanged(name, rows, dp, pp):
    trace = reference(f"trace-{name}.parquet")
    df, meta = read_trace(trace, reference(f"meta-{name}.yaml"))
    assert (meta.dp_size, meta.pp_size, meta.trial_name) == (dp, pp, name)
    assert len(df) == rows
    _assert_canonical(df)
    raw = pq.read_table(trace).to_pandas()
    assert df["start_ts"].dtype == raw["start_ts"].dtype == np.float32
    np.testing.assert_array_equal(df["start_ts"].to_numpy(), raw["start_ts"].to_numpy())
    np.testing.assert_array_equal(df["duration"].to_numpy(), raw["duration"].to_numpy())
    assert (df["optype"].astype(str).to_numpy() == raw["optype"].astype(str).to_numpy()).all()
    for col in INT_COLUMNS:
        np.testing.assert_array_equal(df[col].to_numpy(), raw[col].to_numpy().astype(np.int64))


def test_reference_trace_without_meta_asks_for_meta():
    trace = reference("trace-ST.parquet")
    with pytest.raises(InputError, match="--meta") as exc:
        read_trace(trace)
    assert str(trace) in str(exc.value)


@pytest.mark.parametrize("name,values,needle", [
    ("gc_pause_s", "text", "holds text"),
    ("seq_len_sq_sum", "list", "not one number per row"),
    ("gc_pause_s", -0.5, "infinite or negative"),
    ("seq_len_sq_sum", np.inf, "infinite or negative"),
    ("gc_pause_s", np.nan, "missing values"),
    ("tp_rank", 0.5, "non-integral"),
])
def test_optional_columns_the_analysis_reads_are_checked(tmp_path, tiny_df, tiny_meta, name,
                                                         values, needle):
    src = tiny_df.copy()
    src[name] = ([[1, 2]] * len(src)) if values == "list" else values
    path = tmp_path / "x.parquet"
    write_trace(src, tiny_meta, path)
    with pytest.raises(InputError, match=needle) as e:
        read_trace(path)
    assert name in str(e.value)


def test_an_optional_column_may_be_missing_where_it_says_so(tmp_path, tiny_df, tiny_meta):
    src = tiny_df.copy()
    src["seq_len_sq_sum"] = np.where(src["optype"] == "forward-compute", 4.0e6, np.nan)
    src["gc_pause_s"] = 0.0
    path = tmp_path / "ok.parquet"
    write_trace(src, tiny_meta, path)
    df, _ = read_trace(path)
    assert df["seq_len_sq_sum"].isna().any() and (df["gc_pause_s"] == 0).all()


def test_a_gc_pause_longer_than_its_op_is_refused(tmp_path, tiny_df, tiny_meta):
    src = tiny_df.copy()
    src["gc_pause_s"] = 0.0
    src.loc[3, "gc_pause_s"] = float(src.loc[3, "duration"]) * 50 + 1.0
    path = tmp_path / "gc.parquet"
    write_trace(src, tiny_meta, path)
    with pytest.raises(InputError, match="exceeds the op's own duration"):
        read_trace(path)


@pytest.mark.parametrize("damage,needle", [
    ("no-compute", "no forward/backward-compute op"),
    ("no-p2p", "holds no P2P send/recv between stages"),
    ("one-worker-untimed", "while the others' take time"),
])
def test_a_trace_missing_the_ops_the_method_needs_is_refused(tiny_df, tiny_meta, damage,
                                                             needle):
    df = tiny_df.copy()
    kind = df["optype"].astype(str)
    if damage == "no-compute":
        df = df[~kind.str.endswith("-compute")]
    elif damage == "no-p2p":
        df = df[~kind.str.endswith(("-send", "-recv"))]
    else:
        worker = (df["dp_rank"] == 0) & (df["stage"] == 0) & kind.str.endswith("-compute")
        df.loc[worker, "duration"] = 0.0
    with pytest.raises(InputError, match=needle):
        validate_trace(df.reset_index(drop=True), tiny_meta, "t")


@pytest.mark.parametrize("shift, width", [(0, np.int16), (40_000, np.int32), (2**40, np.int64)])
def test_compact_ints_read_each_int_column_at_the_narrowest_width_that_holds_it(
        tmp_path, tiny_df, tiny_meta, shift, width):
    df = tiny_df.copy()
    df["step"] += shift
    write_trace(df, tiny_meta, tmp_path / "t.parquet")
    compact, _ = read_trace(tmp_path / "t.parquet", compact_ints=True)
    wide, _ = read_trace(tmp_path / "t.parquet")
    _assert_canonical(wide)
    assert compact["step"].dtype == width
    for name in INT_COLUMNS:
        if name != "step":
            assert compact[name].dtype == np.int16, name
        np.testing.assert_array_equal(compact[name].to_numpy(), wide[name].to_numpy())
