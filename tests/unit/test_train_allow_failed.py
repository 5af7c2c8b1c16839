"""`stragglerlab train --allow-failed-run`: a cleanly failed run with a kept trace exits 0.

The launcher is replaced by a fake that writes the run folder, so no Ray or torch is needed.
"""

from __future__ import annotations

import json
import sys
import types

import pytest

from stragglerlab.cli import main


def fake_launcher(outcome: str, keep_trace: bool, steps: list[int]):
    def launch(scenario, out, progress, ray_address=None, keep_monitor=False):
        from pathlib import Path

        run_dir = Path(out)
        run_dir.mkdir(parents=True, exist_ok=True)
        record = {"outcome": outcome, "trace": {"complete_steps": steps},
                  "wall_s": {"total": 1.0}, "backend": "gloo",
                  "error": None if outcome == "ok" else {"rank": 1, "kind": "worker-died",
                                                         "message": "boom"}}
        (run_dir / "run.json").write_text(json.dumps(record))
        if keep_trace:
            (run_dir / "trace.parquet").write_bytes(b"PAR1")
        return record

    return types.SimpleNamespace(launch=launch)


@pytest.mark.parametrize("outcome, keep_trace, steps, flag, code", [
    ("failed", True, [1, 2, 3], True, 0),    # crash/hang by design: analysable, exit 0
    ("failed", True, [1, 2, 3], False, 1),   # without the flag a failed run is exit 1
    ("failed", False, [], True, 1),          # nothing traced: nothing to analyse, exit 1
    ("ok", True, [1, 2], True, 0),
])
def test_allow_failed_run(tmp_path, monkeypatch, capsys, outcome, keep_trace, steps, flag, code):
    monkeypatch.setitem(sys.modules, "stragglerlab.workloads.launcher",
                        fake_launcher(outcome, keep_trace, steps))
    out = tmp_path / "run"
    argv = ["train", "--scenario", "crash", "--out", str(out), "--quiet"]
    assert main(argv + (["--allow-failed-run"] if flag else [])) == code
    out_text = capsys.readouterr().out  # the outcome is the result: stdout, even --quiet
    if outcome == "failed":
        assert "run FAILED: rank 1 worker-died: boom" in out_text
    else:
        assert out_text.startswith("run ok: ")
