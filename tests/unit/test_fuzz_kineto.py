"""Fuzz, Kineto import: duplicated events (A1), misleading messages for a string
rank and an empty profile (M6), rank "files" that are folders, dead symlinks or FIFOs (I3)
and an empty --layout (I4)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from stragglerlab.analysis.whatif_general import whatif_general
from stragglerlab.cli import main
from stragglerlab.importers.chrome import find_traces
from stragglerlab.importers.kineto import import_kineto
from stragglerlab.importers.kineto_events import read_rank
from stragglerlab.importers.kineto_general import build_general, load_ranks
from stragglerlab.util.errors import InputError
from tests.unit.general_fixtures import ddp_doc, write_docs
from tests.unit.kineto_fixtures import FIXTURES, rank_doc

DP2PP2 = FIXTURES / "dp2-pp2"


def _import(folder: Path):
    return build_general(load_ranks(sorted(folder.glob("*.json*"))))


def _cli(tmp_path: Path, capsys, *argv: str) -> tuple[int, str]:
    code = main(["import", "kineto", "--out", str(tmp_path / "o"), "--quiet", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


# A1: every event twice (a trace concatenated with itself) must not double the ops.

@pytest.mark.parametrize(("gpu", "copies"), [(True, 12), (False, 4)])
def test_a1_duplicated_events_give_the_reference_ops_and_s(tmp_path, gpu, copies):
    docs = {r: ddp_doc(r, slow={3: 2.0}, gpu=gpu) for r in range(4)}
    ref = _import(write_docs(tmp_path / "ref", docs))
    for d in docs.values():
        d["traceEvents"] = d["traceEvents"] + d["traceEvents"]
    dup = _import(write_docs(tmp_path / "dup", docs))
    pd.testing.assert_frame_equal(dup.ops, ref.ops)
    assert dup.report["ops"] == ref.report["ops"] == 8
    assert whatif_general(dup.ops).S == whatif_general(ref.ops).S
    # Every kept event repeats: 6 per step on a GPU trace (step, 3 kernels, launch,
    # record_param_comms), 2 on a CPU one (step, record_param_comms); CPU ops are skipped.
    assert dup.report["duplicate_events_dropped"] == {str(r): copies for r in range(4)}
    assert any(n.startswith("dropped exact duplicate events") and f"{copies} on rank 3" in n
               for n in dup.notes)
    assert ref.report["duplicate_events_dropped"] == {}
    assert not any("duplicate" in n for n in ref.notes)


def test_a1_only_one_rank_duplicated_is_named(tmp_path):
    docs = {r: ddp_doc(r, world=2) for r in range(2)}
    docs[1]["traceEvents"] = docs[1]["traceEvents"] * 3
    res = _import(write_docs(tmp_path / "t", docs))
    assert res.report["duplicate_events_dropped"] == {"1": 24}
    assert res.report["ops"] == 4


# M6: the message says what is actually wrong.

@pytest.mark.parametrize("value", ["1", 1.0, True, None])
def test_m6_a_rank_that_is_not_an_integer_is_named_on_the_vocabulary_path(tmp_path, value):
    docs = {r: rank_doc(r) for r in range(4)}
    docs[1]["distributedInfo"]["rank"] = value
    paths = [tmp_path / f"rank{r}.json" for r in range(4)]
    for p, d in zip(paths, docs.values(), strict=True):
        p.write_text(json.dumps(d))
    with pytest.raises(InputError, match=r"distributedInfo.rank must be an integer, but it is "
                                         rf".* \({type(value).__name__}\)") as e:
        import_kineto(paths)
    assert str(paths[1]) in str(e.value) and "no distributedInfo" not in str(e.value)


def test_m6_a_string_rank_or_world_size_on_the_general_path(tmp_path):
    doc = ddp_doc(1)
    doc["distributedInfo"]["rank"] = "1"
    path = write_docs(tmp_path / "a", {1: doc}) / "rank1.json"
    with pytest.raises(InputError, match=r"distributedInfo.rank must be an integer, but it "
                                         r'is "1" \(str\)'):
        read_rank(path)  # not silently the rank from the file name
    doc["distributedInfo"].update(rank=1, world_size="4")
    path = write_docs(tmp_path / "b", {1: doc}) / "rank1.json"
    with pytest.raises(InputError, match="distributedInfo.world_size must be an integer"):
        read_rank(path)


def test_m6_empty_trace_events_says_the_profile_is_empty(tmp_path, capsys):
    traces = tmp_path / "k"
    shutil.copytree(DP2PP2, traces)
    victim = sorted(traces.glob("rank1.json*"))[0]
    raw = victim.read_bytes()
    doc = json.loads(gzip.decompress(raw) if victim.suffix == ".gz" else raw)
    victim.write_text(json.dumps({**doc, "traceEvents": []}))
    code, err = _cli(tmp_path, capsys, "--traces", str(traces))
    assert code == 2 and "holds no trace events" in err and "prof.step()" in err
    assert "record_function" not in err and str(victim) in err
    with pytest.raises(InputError, match="holds no trace events"):
        read_rank(victim)  # the general reader says the same


# I3: an entry named like a trace that is not a regular file is one error naming it.

def _fifo(path: Path, seconds: float = 5.0) -> None:
    """A FIFO at path, with a writer that opens and closes it whenever a reader waits: a
    reader that wrongly opens it sees EOF (the test fails) instead of hanging forever."""
    os.mkfifo(path)

    def write():
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader yet (the fixed code never opens it)
                time.sleep(0.02)
    threading.Thread(target=write, daemon=True).start()


def _folder_with(tmp_path: Path, make) -> tuple[Path, Path]:
    traces = tmp_path / "k"
    shutil.copytree(DP2PP2, traces)
    victim = sorted(traces.glob("rank1.json*"))[0]
    victim.unlink()
    make(victim)
    return traces, victim


@pytest.mark.parametrize(("make", "what"), [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: p.symlink_to(p.name), "is a symlink that does not resolve"),
    (lambda p: p.symlink_to("gone.json"), "is a symlink that does not resolve"),
    (_fifo, r"is not a regular file \(a pipe or a device\?\)"),
])
def test_i3_a_bad_rank_entry_is_named_not_missing(tmp_path, capsys, make, what):
    traces, victim = _folder_with(tmp_path, make)
    with pytest.raises(InputError, match=what) as e:
        find_traces(str(traces))
    assert str(victim) in str(e.value) and "point --traces at the trace files" in str(e.value)
    with pytest.raises(InputError, match=what):  # a glob too
        find_traces(str(traces / "rank*.json*"))
    code, err = _cli(tmp_path, capsys, "--traces", str(traces))
    assert code == 2 and what.replace("\\", "") in err and "missing ranks" not in err
    assert len(err.strip().splitlines()) == 1


def test_i3_readers_refuse_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "rank0.json"
    _fifo(fifo)  # opening it would wait for a writer
    with pytest.raises(InputError, match="not a regular file"):
        read_rank(fifo, vocabulary=True)
    with pytest.raises(InputError, match="not a regular file"):
        read_rank(fifo)


def test_i3_a_glob_may_still_match_other_things(tmp_path):
    traces = shutil.copytree(DP2PP2, tmp_path / "k")
    (traces / "rank_logs").mkdir()  # not named like a trace: not a rank file, no error
    assert len(find_traces(str(traces / "rank*"))) == 4


# I4: an empty --layout is a mistake, not the flag left out.

@pytest.mark.parametrize("value", ["", "  "])
def test_i4_empty_layout_is_one_error(tmp_path, capsys, value):
    code, err = _cli(tmp_path, capsys, "--traces", str(DP2PP2), "--layout", value)
    assert code == 2 and "--layout is empty" in err and "dp=N,pp=M" in err
    assert not (tmp_path / "o" / "import.json").exists()
