"""Parquet metadata written by other tools, or damaged in transit, is never trusted: the
trace (trace.parquet) and the op table (ops.parquet) are built from their columns alone,
so damaged pandas metadata reads as the columns say, and damaged arrow metadata that
stops the file from opening gets one clear error (exit 2), never a traceback."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglerlab.cli import main
from stragglerlab.trace.ops_table import read_ops
from stragglerlab.util.errors import InputError
from tests.unit.test_ops_table import _table

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slow-worker"


def _pandas_damage(pandas: dict) -> dict[str, bytes]:
    """Each class of damage to the b'pandas' metadata, as the bytes stored."""
    columns = pandas.get("columns", [])
    return {
        "index_columns a number": json.dumps({**pandas, "index_columns": 5}).encode(),
        "index_columns a string": json.dumps({**pandas, "index_columns": "rank"}).encode(),
        "index_columns a bad range": json.dumps(
            {**pandas, "index_columns": [{"kind": "range", "start": "x"}]}).encode(),
        "index_columns naming a real column": json.dumps(
            {**pandas, "index_columns": ["rank"]}).encode(),
        "index_columns naming no column": json.dumps(
            {**pandas, "index_columns": ["__index_level_0__"]}).encode(),
        "not JSON": b"{garbage",
        "deeply nested JSON": b"[" * 50_000,
        "not UTF-8": b"\xff\xfe\x00",
        "a JSON list": b"[1, 2]",
        "a JSON null": b"null",
        "columns a number": json.dumps({**pandas, "columns": 5}).encode(),
        "columns of junk": json.dumps({**pandas, "columns": [
            1, "x", None, {"name": 3, "numpy_type": "bogus", "pandas_type": "datetimetz",
                           "metadata": 7}]}).encode(),
        "columns of wrong types": json.dumps({**pandas, "columns": [
            {**c, "numpy_type": "datetime64[ns]", "pandas_type": "categorical",
             "metadata": {"ordered": "x"}} for c in columns if isinstance(c, dict)]}).encode(),
        "column_indexes a number": json.dumps({**pandas, "column_indexes": 3}).encode(),
    }


def _with_metadata(table: pa.Table, key: bytes, value: bytes) -> pa.Table:
    return table.replace_schema_metadata({**(table.schema.metadata or {}), key: value})


def _clean_result(tmp_path: Path) -> dict:
    assert main(["whatif", "--run", str(EXAMPLE), "--out", str(tmp_path / "clean"),
                 "--quiet"]) == 0
    return _comparable(tmp_path / "clean")


def _comparable(out: Path) -> dict:
    doc = json.loads((out / "whatif.json").read_text())
    return {k: v for k, v in doc.items() if k not in ("inputs", "created", "written")}


def test_damaged_pandas_metadata_in_a_trace_reads_as_its_columns(tmp_path, capsys):
    clean = _clean_result(tmp_path)
    table = pq.read_table(EXAMPLE / "trace.parquet")
    pandas = json.loads(table.schema.metadata[b"pandas"])
    for name, damaged in _pandas_damage(pandas).items():
        run = tmp_path / "runs" / name.replace(" ", "-")
        shutil.copytree(EXAMPLE, run)
        pq.write_table(_with_metadata(table, b"pandas", damaged), run / "trace.parquet")
        out = tmp_path / "out" / run.name
        code = main(["whatif", "--run", str(run), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert code == 0, f"{name}: {err}"
        assert _comparable(out) == clean, name


def test_a_stored_pandas_index_is_not_a_column_of_the_trace(tmp_path, capsys):
    """A frame written with its index (pyarrow names it __index_level_0__) reads as the
    frame: the index column is known by its name, not by the metadata."""
    clean = _clean_result(tmp_path)
    table = pq.read_table(EXAMPLE / "trace.parquet")
    index = pa.array(np.arange(table.num_rows) * 7)
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    pq.write_table(_with_metadata(table.append_column("__index_level_0__", index), b"pandas",
                                  b"{garbage"), run / "trace.parquet")
    assert main(["whatif", "--run", str(run), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert _comparable(tmp_path / "o") == clean


def _arrow_schema_blob(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _write_with_arrow_schema(table: pa.Table, path: Path, blob: str) -> None:
    """`table` at `path` with `blob` as its stored arrow schema (ARROW:schema)."""
    with pq.ParquetWriter(path, table.schema, store_schema=False) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata({"ARROW:schema": blob})


def _arrow_damage(schema: pa.Schema, seconds: str) -> dict[str, tuple[str, bool]]:
    """Each class of damage to the stored arrow schema -> (the blob, whether the columns
    alone still read: pyarrow passes over a schema that does not fit the file).
    `seconds`: a float column of the table."""
    fields = list(schema)

    def retyped(name: str, t: pa.DataType) -> str:
        return _arrow_schema_blob(pa.schema([pa.field(f.name, t) if f.name == name else f
                                             for f in fields]))

    uuid = {b"ARROW:extension:name": b"arrow.uuid", b"ARROW:extension:metadata": b""}
    return {
        "not base64": ("!!!notbase64", False),
        "base64 of junk": (base64.b64encode(b"\0" * 40).decode(), False),
        "an extension type that cannot hold the column": (_arrow_schema_blob(pa.schema(
            [pa.field(f.name, f.type, metadata=uuid) if f.name == "rank" else f
             for f in fields])), False),
        "fewer fields": (_arrow_schema_blob(pa.schema(fields[:3])), True),
        "a number column as text": (retyped(seconds, pa.string()), True),
        "a number column as timestamps": (retyped("rank", pa.timestamp("ns")), True),
        "fields renamed": (_arrow_schema_blob(pa.schema(
            [pa.field("x" + f.name, f.type) for f in fields])), True),
    }


def test_damaged_arrow_metadata_in_a_trace_reads_or_is_one_clear_error(tmp_path, capsys):
    clean = _clean_result(tmp_path)
    table = pq.read_table(EXAMPLE / "trace.parquet")
    for name, (blob, reads) in _arrow_damage(table.schema, "duration").items():
        run = tmp_path / "runs" / name.replace(" ", "-")
        shutil.copytree(EXAMPLE, run)
        _write_with_arrow_schema(table, run / "trace.parquet", blob)
        out = tmp_path / "out" / run.name
        code = main(["whatif", "--run", str(run), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert "Traceback" not in err, name
        if reads:
            assert code == 0, f"{name}: {err}"
            assert _comparable(out) == clean, name
        else:
            assert code == 2, name
            assert err.startswith("stragglerlab whatif: error: ") and err.count("\n") == 1
            assert "trace.parquet" in err and "the arrow schema stored in it" in err, err
            assert not out.exists(), name


def _ops_table(tmp_path: Path) -> tuple[pa.Table, Path]:
    path = tmp_path / "ops.parquet"
    _table().to_parquet(path, index=False)
    return pq.read_table(path), path


def test_damaged_pandas_metadata_in_an_op_table_reads_as_its_columns(tmp_path):
    table, path = _ops_table(tmp_path)
    clean = read_ops(path, again="re-import")
    for name, damaged in _pandas_damage(json.loads(table.schema.metadata[b"pandas"])).items():
        pq.write_table(_with_metadata(table, b"pandas", damaged), path)
        ops = read_ops(path, again="re-import")
        assert ops.equals(clean), name
    pq.write_table(table.append_column("__index_level_0__", pa.array(range(table.num_rows))),
                   path)
    assert read_ops(path, again="re-import").equals(clean)


def test_damaged_arrow_metadata_in_an_op_table_reads_or_is_one_clear_error(tmp_path):
    table, path = _ops_table(tmp_path)
    clean = read_ops(path, again="re-import")
    for name, (blob, reads) in _arrow_damage(table.schema, "start_s").items():
        _write_with_arrow_schema(table, path, blob)
        if reads:
            assert read_ops(path, again="re-import").equals(clean), name
        else:
            with pytest.raises(InputError, match="re-import") as e:
                read_ops(path, again="re-import")
            assert "the arrow schema stored in it" in str(e.value), name
