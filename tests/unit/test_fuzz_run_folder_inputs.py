"""Bad input a fuzz round found accepted in silence: a run folder's meta.yaml or
whatif.json that is something else than a file, a trace whose rank column disagrees with
its workers, `monitor --once` on a folder with no run, `list --config` for what it does not
read. Each is one error naming the input."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from stragglerlab.cli import main


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("s49") / "run"
    assert main(["synth", "--out", str(out), "--dp", "2", "--pp", "2", "--steps", "3",
                 "--quiet"]) == 0
    return out


def _copy(src, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(src, dst)
    return dst


def _one_error(capsys, verb: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"stragglerlab {verb}: error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_a_meta_yaml_that_is_a_folder_is_named_not_skipped(synth_run, tmp_path, capsys):
    run = _copy(synth_run, tmp_path)
    (run / "meta.yaml").unlink()
    (run / "meta.yaml").mkdir()
    assert main(["whatif", "--run", str(run), "--quiet"]) == 2
    err = _one_error(capsys, "whatif")
    assert "meta.yaml: is a folder" in err and "replace it with the job's meta.yaml" in err


def test_a_whatif_json_that_is_a_folder_is_named_not_reanalysed(synth_run, tmp_path, capsys):
    run = _copy(synth_run, tmp_path)
    (run / "whatif" / "whatif.json").mkdir(parents=True)
    assert main(["plot", "--run", str(run), "--quiet"]) == 2
    assert "whatif.json: is a folder" in _one_error(capsys, "plot")


def test_a_rank_column_out_of_step_with_the_workers_is_refused(synth_run, tmp_path, capsys):
    run = _copy(synth_run, tmp_path)
    trace = pd.read_parquet(run / "trace.parquet")
    shared = trace.assign(rank=0)
    shared.to_parquet(run / "trace.parquet")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 2
    assert "rank 0 is the rank of 4 (dp_rank, stage) workers" in _one_error(capsys, "whatif")
    mixed = trace.copy()
    mixed.loc[mixed.index[::7], "rank"] = 99
    mixed.to_parquet(run / "trace.parquet")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 2
    assert "rank differs within one (dp_rank, stage) worker" in _one_error(capsys, "whatif")


def test_monitor_once_on_a_folder_with_no_run_is_refused_and_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["monitor", "--run", str(empty), "--once", "--no-serve", "--quiet"]) == 2
    assert "holds no trace of a `stragglerlab train` run" in _one_error(capsys, "monitor")
    assert list(empty.iterdir()) == []
    (empty / "import.json").write_text("{}")
    assert main(["monitor", "--run", str(empty), "--once", "--no-serve", "--quiet"]) == 2
    assert "an import cut short" in _one_error(capsys, "monitor")
    (empty / "ops.parquet").write_bytes(b"x")  # an import, damaged: its reader says so
    assert main(["monitor", "--run", str(empty), "--once", "--no-serve", "--quiet"]) == 2
    assert "ops.parquet: the op table cannot be read" in _one_error(capsys, "monitor")
    assert not (empty / "monitor").exists()


def test_list_config_is_for_scenarios_only(tmp_path, capsys):
    cfg = tmp_path / "x.yaml"
    cfg.write_text("scenarios: {}\n")
    assert main(["list", "detectors", "--config", str(cfg)]) == 2
    assert "read by `list scenarios` only" in _one_error(capsys, "list")


def test_a_pipe_in_place_of_a_rank_status_file_is_named_not_read(tmp_path):
    import os

    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.util.errors import InputError

    (tmp_path / "status").mkdir()
    (tmp_path / "status" / "rank0.json").write_text('{"step": 3}')
    os.mkfifo(tmp_path / "status" / "rank1.json")  # read, it would block forever
    with pytest.raises(InputError, match="rank1.json: is not a regular file"):
        RunFolder(path=tmp_path).status()
    (tmp_path / "status" / "rank1.json").unlink()
    assert RunFolder(path=tmp_path).status() == {0: {"step": 3}}


@pytest.mark.parametrize("field", ["slowdown", "worker_score"])
def test_a_slowdown_past_any_job_is_refused_not_drawn(synth_run, tmp_path, capsys, field):
    import json

    run = _copy(synth_run, tmp_path)
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    capsys.readouterr()
    path = run / "whatif" / "whatif.json"
    doc = json.loads(path.read_text())
    if field == "slowdown":
        doc["slowdown"] = 1e300
    else:
        doc["compute_ideals"]["mean"]["worker_score"][0][0] = 1e308
    path.write_text(json.dumps(doc))
    assert main(["plot", "--whatif", str(path), "--out", str(tmp_path / "p"), "--quiet"]) == 2
    assert "out of range [0.0, 1000000.0]" in _one_error(capsys, "plot")
