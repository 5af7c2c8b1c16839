"""Fuzz: a rank trace that is a JSON scalar, a zip named .json.gz, or
an empty file gets one error naming what it is, on the streaming TraceReader, on both
import paths' reading of a rank (read_rank, general and vocabulary) and through
`stragglerlab import kineto`."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.importers.kineto_events import read_rank
from stragglerlab.importers.stream_json import TraceReader
from stragglerlab.util.errors import InputError
from tests.unit.kineto_fixtures import FIXTURES, rank_doc


def _both(path: Path, match: str) -> None:
    """The reader, and both paths' reading of a rank, refuse `path` with a message matching
    `match`, naming the file."""
    for read in (lambda p: list(TraceReader(path=p).batches()), read_rank,
                 lambda p: read_rank(p, vocabulary=True)):
        with pytest.raises(InputError, match=match) as e:
            read(path)
        assert str(path) in str(e.value)


@pytest.mark.parametrize(("text", "kind"), [
    ("null\n", "a JSON null"), ("42", r"a JSON number \(42\)"), ('"trace"', "a JSON string"),
    ("true", "a JSON true"), ("-1.5e3 ", r"a JSON number \(-1500.0\)")])
def test_a_json_scalar_is_named_not_called_invalid_json(tmp_path, text, kind):
    path = tmp_path / "rank0.json"
    path.write_text(text)
    _both(path, f"{kind}, not a Chrome trace object")


def test_a_json_scalar_in_gzip_is_named_too(tmp_path):
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(b"null"))
    _both(path, "a JSON null, not a Chrome trace object")


def test_text_that_is_no_json_still_says_not_valid_json(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text("garbage")
    _both(path, "not valid JSON")


def test_a_zip_named_json_gz_is_called_a_zip_not_truncated_json(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("rank0.json", json.dumps(rank_doc(0)))
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(buf.getvalue())
    _both(path, r"not gzip: a zip archive \(starts with b'PK")
    with pytest.raises(InputError) as e:
        read_rank(path, vocabulary=True)
    assert "truncated" not in str(e.value)


def test_binary_bytes_named_json_gz_are_not_gzip(tmp_path):
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(b"\x00\x01\x02garbage")
    _both(path, "not gzip")


@pytest.mark.parametrize("name", ["rank0.json.gz", "rank0.json"])
def test_an_empty_file_says_it_is_empty(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    _both(path, r"the file is empty \(0 bytes\)")


def test_gzip_of_nothing_says_it_holds_no_json(tmp_path):
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(b""))
    _both(path, "holds no JSON")


def test_plain_json_named_gz_still_reads(tmp_path):
    path = tmp_path / "rank0.json.gz"
    path.write_text(json.dumps(rank_doc(0)))
    assert read_rank(path, vocabulary=True).vocab.ranges


def test_import_kineto_names_the_zip_and_the_empty_file(tmp_path, capsys):
    traces = tmp_path / "k"
    shutil.copytree(FIXTURES / "dp2-pp2", traces)
    victim = sorted(traces.glob("rank0.json*"))[0]
    victim.unlink()
    victim = traces / "rank0.json.gz"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("rank0.json", json.dumps(rank_doc(0)))
    victim.write_bytes(buf.getvalue())
    argv = ["import", "kineto", "--traces", str(traces), "--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "a zip archive" in err and "Traceback" not in err
    victim.write_bytes(b"")
    assert main(argv) == 2
    assert "the file is empty (0 bytes)" in capsys.readouterr().err
