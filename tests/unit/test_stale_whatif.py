"""A what-if result read beside a trace it was not computed from is refused, naming how
they differ: findings drawn from it would name steps and workers of another job."""

from __future__ import annotations

import shutil
from pathlib import Path

from stragglerlab.cli import main
from stragglerlab.trace.trace_io import read_trace, write_trace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slow-worker"


def test_detect_refuses_a_whatif_of_other_steps(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("trace.parquet", "meta.yaml"):
        shutil.copy(EXAMPLE / name, run / name)
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert main(["detect", "--run", str(run), "--detector", "whatif", "--quiet"]) == 0
    df, meta = read_trace(run / "trace.parquet")
    write_trace(df[df["step"] < df["step"].max()], meta, run / "trace.parquet")  # one less
    capsys.readouterr()
    assert main(["detect", "--run", str(run), "--detector", "whatif", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "written from another trace" in err and "its steps" in err
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0  # the fix the message names
    assert main(["detect", "--run", str(run), "--detector", "whatif", "--quiet"]) == 0


def test_whatif_run_with_the_meta_in_the_parquet_and_bad_run_flags(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(EXAMPLE / "trace.parquet", run / "trace.parquet")  # no meta.yaml beside it
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0  # the parquet's own meta
    assert main(["whatif", "--run", "", "--quiet"]) == 2
    assert "--run is empty" in capsys.readouterr().err
    assert main(["whatif", "--run", str(tmp_path / "nope"), "--quiet"]) == 2
    assert "no such folder" in capsys.readouterr().err
