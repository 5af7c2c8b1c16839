"""Fuzz: a run folder whose meta.yaml is a dangling or looping symbolic
link is refused with the link named, not analysed silently with the trace's embedded meta.
(world_size: 0 stays accepted: JobMeta documents 0 as "compute it from the sizes".)"""

from __future__ import annotations

import os

import pytest

from stragglerlab.cli import main
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.errors import InputError


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A 6-step DP 2 x PP 2 synth run folder."""
    out = tmp_path_factory.mktemp("s47meta") / "src"
    assert main(["synth", "--out", str(out), "--dp", "2", "--pp", "2", "--steps", "6",
                 "--quiet"]) == 0
    return out


def _linked(tmp_path, src, target: str):
    run = tmp_path / "r"
    run.mkdir()
    os.symlink(src / "trace.parquet", run / "trace.parquet")
    os.symlink(target, run / "meta.yaml")
    return run


@pytest.mark.parametrize("kind", ["dangling", "looping"])
def test_a_broken_meta_link_is_named(tmp_path, src, kind):
    target = str(tmp_path / "nowhere.yaml") if kind == "dangling" else "meta.yaml"
    folder = RunFolder(path=_linked(tmp_path, src, target))
    for read in (lambda: folder.has_meta, lambda: folder.meta, folder.trace):
        with pytest.raises(InputError, match="meta.yaml is a symbolic link to .* which does "
                                             "not resolve") as e:
            read()
        assert str(folder.meta_path) in str(e.value)


@pytest.mark.parametrize("verb", ["detect", "whatif"])
def test_a_dangling_meta_link_is_one_error_line(tmp_path, src, capsys, verb):
    run = _linked(tmp_path, src, str(tmp_path / "nowhere.yaml"))
    extra = ["--noise-floor", "none"] if verb == "detect" else []
    assert main([verb, "--run", str(run), *extra, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stragglerlab {verb}: error: ") and "nowhere.yaml" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_good_meta_link_and_no_meta_still_read(tmp_path, src):
    linked = RunFolder(path=_linked(tmp_path, src, str(src / "meta.yaml")))
    assert linked.has_meta and linked.meta.dp_size == 2
    bare = tmp_path / "bare"
    bare.mkdir()
    os.symlink(src / "trace.parquet", bare / "trace.parquet")
    assert not RunFolder(path=bare).has_meta and RunFolder(path=bare).meta.pp_size == 2


def test_world_size_zero_is_documented_as_computed():
    assert JobMeta.from_dict({"dp_size": 2, "pp_size": 4, "world_size": 0}).world_size == 8
