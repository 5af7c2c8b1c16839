"""Bad inputs found by the s54 fuzz (classes of mistakes, not one case each): a worker's
clock shifted by less than a step, and the other silent acceptances that round found."""

from __future__ import annotations

import pytest

from stragglerlab.cli import main
from stragglerlab.run_folder import RunFolder
from stragglerlab.trace_io import write_trace
from tests.unit.monitor_helpers import synth


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A finished 4-step DP 2 x PP 2 synth run (trace.parquet, meta.yaml)."""
    return synth(tmp_path_factory.mktemp("s54") / "src", "--steps", "4")


@pytest.mark.parametrize("shift_steps", [0.3, -0.3])
def test_a_worker_clock_shifted_inside_the_step_is_refused(tmp_path, src, capsys, shift_steps):
    """One worker's start_ts off by a third of a step: its spans still overlap the others'
    (the one-clock check passes), but some recvs now end before their sends start, and the
    what-if read the shift as waiting (S 1.23 -> 1.71, the wrong top worker)."""
    folder = RunFolder(path=src)
    df = folder.trace().copy()
    end = df["start_ts"] + df["duration"]
    span = (end.groupby(df["step"]).max() - df.groupby("step")["start_ts"].min()).median()
    df.loc[(df["dp_rank"] == 1) & (df["stage"] == 1), "start_ts"] += shift_steps * span
    write_trace(df, folder.meta, tmp_path / "trace.parquet")
    code = main(["whatif", "--trace", str(tmp_path / "trace.parquet"), "--meta",
                 str(src / "meta.yaml"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "P2P recv" in err and "before its send" in err and "one clock" in err


def test_the_unshifted_trace_passes(tmp_path, src):
    assert main(["whatif", "--run", str(src), "--out", str(tmp_path), "--quiet"]) == 0
