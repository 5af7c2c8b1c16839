"""`train` into a finished run's folder is refused without --overwrite (its trace and the
what-if made from it would be lost); failed, killed and workflow-cleared folders are
replaced as before. The launcher is replaced: no Ray, no torch run."""

from __future__ import annotations

import json

import pytest

from stragglerlab.cli import main


@pytest.fixture
def launches(monkeypatch):
    import stragglerlab.host.residue as residue
    import stragglerlab.workloads.launcher as launcher

    calls = []

    def launch(_scenario, run_dir, *_a, **_k):
        calls.append(str(run_dir))
        return {"outcome": "ok", "trace": {"complete_steps": [3, 4]}, "wall_s": {"total": 1.0},
                "backend": "gloo", "error": None}

    monkeypatch.setattr(launcher, "launch", launch)
    monkeypatch.setattr(residue, "clean_residue", lambda *a, **k: {})
    return calls


def _finished(out, outcome="ok"):
    (out / "whatif").mkdir(parents=True)
    (out / "whatif" / "whatif.json").write_text("{}")
    (out / "run.json").write_text(json.dumps({"outcome": outcome}))
    (out / "trace.parquet").write_bytes(b"PAR1 old trace")
    (out / "meta.yaml").write_text("old: 1\n")


def test_a_finished_run_is_kept_unless_overwrite(tmp_path, capsys, launches):
    out = tmp_path / "run"
    _finished(out)
    argv = ["train", "--scenario", "clean-dp2-pp2", "--out", str(out), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "its whatif/" in err
    assert "--overwrite" in err and len(err.splitlines()) == 1
    assert launches == [] and (out / "trace.parquet").read_bytes() == b"PAR1 old trace"
    assert (out / "whatif" / "whatif.json").exists()
    assert main(argv + ["--overwrite"]) == 0 and launches == [str(out)]


@pytest.mark.parametrize("left", ["failed", "killed"])
def test_a_failed_or_killed_run_is_replaced_as_a_retry(tmp_path, launches, left):
    out = tmp_path / "run"
    _finished(out, outcome="failed")
    if left == "killed":  # no run.json; the trace parts say train wrote the folder
        (out / "run.json").unlink()
        (out / "trace-parts").mkdir()
    assert main(["train", "--scenario", "clean-dp2-pp2", "--out", str(out), "--quiet"]) == 0
    assert launches == [str(out)]
