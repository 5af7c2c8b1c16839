"""A reused run folder starts clean: nothing of an earlier run leaks into the new one."""

from __future__ import annotations

from pathlib import Path

from workloads.launcher import _prepare_dir


def test_prepare_dir_removes_every_output_of_an_earlier_run(tmp_path: Path):
    run = tmp_path / "run"
    for rel in ("trace-parts/rank0.bin", "status/rank0.json", "gc/rank0.jsonl",
                "trace.parquet", "run.json", "faults.json", "meta.yaml"):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text("old")
    (run / "notes.txt").write_text("the user's own file")
    _prepare_dir(run)
    left = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert left == ["notes.txt"]
