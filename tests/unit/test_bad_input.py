"""Every kind of bad trace input gives one InputError naming the file and the problem."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.trace_io import read_trace, read_trace_table, write_trace
from stragglerlab.trace.validate import validate_trace
from stragglerlab.util.errors import InputError


def _error(path: Path, meta_path: Path | None = None) -> str:
    """read_trace's InputError message; fails the test on success or on any other error,
    or when read_trace_table (the what-if's reader) says anything else."""
    with pytest.raises(InputError) as exc:
        read_trace(path, meta_path)
    message = str(exc.value)
    assert message.startswith(f"{path}: "), message
    assert exc.value.path == str(path)
    with pytest.raises(InputError) as table_exc:
        read_trace_table(path, meta_path)
    assert str(table_exc.value) == message and table_exc.value.path == str(path)
    return message


def _bad(tmp_path: Path, df: pd.DataFrame, meta: JobMeta) -> Path:
    path = tmp_path / "bad.parquet"
    write_trace(df, meta, path)
    return path


# --- files that cannot be read -------------------------------------------------------


def test_missing_file(tmp_path):
    assert "does not exist" in _error(tmp_path / "nope.parquet")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"")
    assert "empty (0 bytes)" in _error(path)


def test_not_parquet(tmp_path):
    path = tmp_path / "trace.parquet"
    path.write_text("rank,dp_rank\n0,0\n")
    assert "not a readable parquet file" in _error(path)


def test_truncated_parquet(tmp_path, tiny_parquet):
    data = tiny_parquet.read_bytes()
    tiny_parquet.write_bytes(data[: len(data) // 2])
    assert "parquet" in _error(tiny_parquet)


def test_directory(tmp_path):
    assert "is a directory" in _error(tmp_path)


def test_no_meta_anywhere(tmp_path, tiny_df):
    path = tmp_path / "nometa.parquet"
    tiny_df.to_parquet(path)
    assert "pass the job meta YAML with --meta" in _error(path)


def test_meta_world_size_inconsistent(tmp_path, tiny_parquet):
    meta_file = tmp_path / "meta.yaml"
    meta_file.write_text("dp_size: 2\npp_size: 2\nworld_size: 8\n")
    with pytest.raises(InputError) as exc:
        read_trace(tiny_parquet, meta_file)
    assert str(exc.value).startswith(str(meta_file)) and "world_size 8" in str(exc.value)


def test_schema_version_mismatch(tmp_path, tiny_df, tiny_meta, monkeypatch):
    import stragglerlab.trace.trace_io as tio

    monkeypatch.setattr(tio, "SCHEMA_VERSION", "99")
    write_trace(tiny_df, tiny_meta, tmp_path / "v99.parquet")
    monkeypatch.undo()
    assert "schema version '99'" in _error(tmp_path / "v99.parquet")


# --- table content --------------------------------------------------------------------


def test_missing_columns(tmp_path, tiny_df, tiny_meta):
    msg = _error(_bad(tmp_path, tiny_df.drop(columns=["duration", "gmc"]), tiny_meta))
    assert "missing column(s) 'duration', 'gmc'" in msg and "add or rename" in msg


def test_empty_trace(tmp_path, tiny_df, tiny_meta):
    msg = _error(_bad(tmp_path, tiny_df.iloc[:0], tiny_meta))
    assert "empty (0 rows)" in msg


def test_string_in_numeric_column(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.astype({"start_ts": str})
    df.loc[3, "start_ts"] = "abc"
    msg = _error(_bad(tmp_path, df, tiny_meta))
    # text in a numeric column is refused whole, numeric-looking or not (issue 33)
    assert "column 'start_ts' holds text" in msg and "write it as seconds" in msg


def test_non_integral_float_in_int_column(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.astype({"step": float})
    df.loc[5, "step"] = 7.5
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "column 'step' must hold integers" in msg and "row 5 (step=7.5" in msg


def test_integral_floats_in_int_column_are_fine(tmp_path, tiny_df, tiny_meta):
    df, _ = read_trace(_bad(tmp_path, tiny_df.astype({"mb_id": float}), tiny_meta))
    assert df["mb_id"].dtype == np.int64


def test_bool_in_int_column(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.assign(mc=tiny_df["mc"] > 0)
    assert "column 'mc' must hold integers but has dtype bool" in _error(
        _bad(tmp_path, df, tiny_meta)
    )


@pytest.mark.parametrize("column", ["duration", "mb_id", "optype"])
def test_nan_in_required_column(tmp_path, tiny_df, tiny_meta, column):
    df = tiny_df.astype({column: object})
    df.loc[[4, 9], column] = None
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert f"column '{column}' has missing values" in msg
    assert "2 rows, e.g. row 4 (step=7, dp_rank=0, stage=0" in msg and "row 9 (" in msg


def test_infinite_start(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[2, "start_ts"] = np.inf
    assert "column 'start_ts' has infinite values" in _error(_bad(tmp_path, df, tiny_meta))


def test_negative_duration(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[6, "duration"] = -0.002
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "negative duration in 1 row, e.g. row 6" in msg and "duration=-0.002" in msg
    assert "must be >= 0" in msg


def test_unknown_optype(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[1, "optype"] = "fwd-compute"
    df.loc[20, "optype"] = "allreduce"
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "unknown optype value(s) 'fwd-compute', 'allreduce'" in msg
    assert "row 1 (step=7, dp_rank=0, stage=0, optype='fwd-compute')" in msg
    assert "allowed: forward-compute, backward-compute," in msg


def test_dp_rank_outside_meta(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[df["dp_rank"] == 1, "dp_rank"] = 2
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "dp_rank outside [0, dp_size=2)" in msg and "dp_rank=2" in msg and "60 rows" in msg


def test_stage_outside_meta(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[0, "stage"] = -1
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "stage outside [0, pp_size=2)" in msg and "row 0 (step=7, dp_rank=0, stage=-1)" in msg


def test_meta_larger_than_trace(tmp_path, tiny_df):
    msg = _error(_bad(tmp_path, tiny_df, JobMeta(dp_size=2, pp_size=3)))
    assert "holds 4 of the dp_size*pp_size = 2*3 = 6 (dp_rank, stage) cells" in msg
    assert "missing (dp_rank, stage): (0, 2), (1, 2)" in msg


def test_step_missing_a_worker(tmp_path, tiny_df, tiny_meta):
    df = tiny_df[~((tiny_df["step"] == 8) & (tiny_df["dp_rank"] == 1) & (tiny_df["stage"] == 1))]
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "step 8 has no rows for (dp_rank=1, stage=1)" in msg and "drop incomplete" in msg


def test_step_missing_an_op(tmp_path, tiny_df, tiny_meta):
    victim = tiny_df.index[
        (tiny_df["step"] == 8)
        & (tiny_df["dp_rank"] == 1)
        & (tiny_df["stage"] == 0)
        & (tiny_df["optype"] == "forward-compute")
    ][0]
    # Three steps so "expected" is the majority count, not a tie.
    third = tiny_df[tiny_df["step"] == 7].assign(step=9)
    df = pd.concat([tiny_df.drop(index=victim), third], ignore_index=True)
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "step 8 (dp_rank=1, stage=0) has 1 'forward-compute' rows, expected 2" in msg, msg


def test_optype_absent_from_one_step(tmp_path, tiny_df, tiny_meta):
    drop = (tiny_df["step"] == 7) & (tiny_df["optype"] == "optimizer") & (tiny_df["stage"] == 1)
    msg = _error(_bad(tmp_path, tiny_df[~drop], tiny_meta))
    assert "step 7 (dp_rank=0, stage=1) has 0 'optimizer' rows, expected 1" in msg
    # A tie between steps (0 vs 1) resolves to the larger count.
    assert "step 7 (dp_rank=1, stage=1) has 0 'optimizer' rows, expected 1" in msg


def test_extra_op_in_one_step(tmp_path, tiny_df, tiny_meta):
    extra = tiny_df[(tiny_df["step"] == 7) & (tiny_df["optype"] == "gc")].iloc[:1]
    df = pd.concat([tiny_df, extra, tiny_df[tiny_df["step"] == 8].assign(step=9)])
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "step 7 (dp_rank=0, stage=0) has 2 'gc' rows, expected 1" in msg


def test_validate_trace_directly_on_text_frame(tiny_df, tiny_meta):
    df = tiny_df.astype(object)
    df.loc[7, "seq_id"] = "x"
    with pytest.raises(InputError) as exc:
        validate_trace(df, tiny_meta, "some.csv")
    assert str(exc.value).startswith("some.csv: column 'seq_id' must hold integers")


def test_a_rank_on_a_clock_of_its_own(tmp_path, tiny_df, tiny_meta):
    # One rank's clock an hour off: every op fine on its own, but the rank's steps no
    # longer meet the others' in time, which a synchronous step cannot do.
    df = tiny_df.copy()
    rank = int(df["rank"].max())
    df.loc[df["rank"] == rank, "start_ts"] += 3600.0
    msg = _error(_bad(tmp_path, df, tiny_meta))
    assert "not on one clock" in msg and "after worker" in msg
    shifted = tiny_df.copy()
    shifted["start_ts"] += 3600.0  # the whole job moved: one clock still
    read_trace(_bad(tmp_path, shifted, tiny_meta))


def test_one_compute_kind_never_timed(tmp_path, tiny_df, tiny_meta):
    df = tiny_df.copy()
    df.loc[df["optype"].astype(str) == "forward-compute", "duration"] = 0.0
    assert "every forward-compute duration is 0" in _error(_bad(tmp_path, df, tiny_meta))
