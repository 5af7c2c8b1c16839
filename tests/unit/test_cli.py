"""`stragglerlab whatif` end to end through the console script: outputs, exit codes, messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.trace_io import write_trace


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stragglerlab", *args], capture_output=True, text=True
    )


def test_whatif_writes_every_output(tiny_parquet: Path, tmp_path: Path):
    out = tmp_path / "out"
    proc = run_cli("whatif", "--trace", str(tiny_parquet), "--out", str(out), "--timelines")
    assert proc.returncode == 0, proc.stderr
    for name in ["whatif.json", "timeline.json.gz", "ideal-timeline.json.gz",
                 "artifact-format/result.json", "artifact-format/mw.json",
                 "artifact-format/ms.json"]:
        assert (out / name).stat().st_size > 0, name
    result = json.loads((out / "whatif.json").read_text())
    assert result["slowdown"] >= 0.9
    assert result["job_meta"]["dp_size"] == 2
    assert len(result["worker_score"]) == 2 and len(result["worker_score"][0]) == 2
    assert "slowdown S" in proc.stdout and "M_W" in proc.stdout
    assert "graph:" in proc.stderr  # progress


def _cycle_trace() -> pd.DataFrame:
    """dp1 x pp2, one step; stage 0 runs B0 before F1 while stage 1 runs F1 before B0."""
    rows = [  # stage, optype, seq_id, start, duration, mb_id
        (0, "forward-compute", 0, 0.0, 1.0, 0), (0, "backward-compute", 0, 2.0, 1.0, 0),
        (0, "forward-compute", 1, 4.0, 1.0, 1), (0, "backward-compute", 1, 6.0, 1.0, 1),
        (0, "forward-send", 0, 1.0, 0.1, -1), (0, "forward-send", 1, 5.0, 0.1, -1),
        (0, "backward-recv", 0, 1.5, 0.5, -1), (0, "backward-recv", 1, 5.5, 0.5, -1),
        (0, "optimizer", 0, 7.0, 0.1, -1),
        (1, "forward-compute", 0, 1.1, 0.9, 0), (1, "forward-compute", 1, 2.1, 0.9, 1),
        (1, "backward-compute", 0, 3.1, 0.9, 0), (1, "backward-compute", 1, 4.1, 0.9, 1),
        (1, "forward-recv", 0, 1.0, 0.1, -1), (1, "forward-recv", 1, 2.0, 0.1, -1),
        (1, "backward-send", 0, 4.0, 0.1, -1), (1, "backward-send", 1, 5.0, 0.1, -1),
        (1, "optimizer", 0, 7.0, 0.1, -1),
    ]
    df = pd.DataFrame(rows, columns=["stage", "optype", "seq_id", "start_ts", "duration",
                                     "mb_id"])
    is_compute = df["optype"].str.endswith("compute")
    df["rank"] = df["stage"]
    df["dp_rank"] = 0
    df["step"] = 1
    df["mc"] = np.where(is_compute, 0, -1)
    df["gmc"] = df["stage"].where(is_compute, -1)
    return df


def test_dependency_cycle_is_a_clear_error(tmp_path: Path):
    trace = tmp_path / "cycle.parquet"
    write_trace(_cycle_trace(), JobMeta(dp_size=1, pp_size=2), trace)
    proc = run_cli("whatif", "--trace", str(trace), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "cycle" in proc.stderr and str(trace) in proc.stderr
    assert "Traceback" not in proc.stderr


BAD_INPUTS = {
    "not parquet": (lambda df: None, "not a readable parquet"),
    "missing column": (lambda df: df.drop(columns=["duration"]), "missing column"),
    "negative duration": (lambda df: df.assign(duration=df["duration"].where(
        df.index != 3, -1.0)), "negative duration"),
    "unknown optype": (lambda df: df.assign(optype=df["optype"].where(
        df.index != 5, "warp-drive")), "unknown optype"),
    "missing ops": (lambda df: df.drop(index=[7]), "missing"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_one_message(case, tmp_path, tiny_df, tiny_meta):
    mutate, needle = BAD_INPUTS[case]
    trace = tmp_path / "bad.parquet"
    bad = mutate(tiny_df.copy())
    if bad is None:
        trace.write_text("this is not a parquet file\n")
    else:
        write_trace(bad, tiny_meta, trace)
    proc = run_cli("whatif", "--trace", str(trace), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and str(trace) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "whatif.json").exists()


def test_meta_inconsistent_with_trace(tmp_path, tiny_parquet):
    meta = tmp_path / "meta.yaml"
    meta.write_text("dp_size: 4\npp_size: 2\ntp_size: 1\nworld_size: 8\n")
    proc = run_cli("whatif", "--trace", str(tiny_parquet), "--meta", str(meta),
                   "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "dp_size" in proc.stderr
