"""A real run with the Kineto profiler on, imported back: S agrees with our own trace (slow tier).

    .venv/bin/python -m pytest -m slow tests/e2e/test_import_kineto_e2e.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.stragglerlab_cli import cli

pytestmark = pytest.mark.slow


def slowdown(trace: Path, meta: Path, out: Path) -> float:
    cli("whatif", "--trace", str(trace), "--meta", str(meta), "--out", str(out), "--quiet")
    return json.loads((out / "whatif.json").read_text())["slowdown"]


def test_profiled_run_imports_with_the_same_slowdown(tmp_path):
    config = tmp_path / "kineto.yaml"
    config.write_text("scenarios:\n  clean-dp2-pp2:\n    run: {profiler: kineto}\n")
    run = tmp_path / "run"
    cli("train", "--scenario", "clean-dp2-pp2", "--config", str(config), "--steps", "7",
        "--out", str(run), "--quiet")
    traces = sorted((run / "kineto").glob("rank*.json.gz"))
    assert [p.name for p in traces] == [f"rank{r}.json.gz" for r in range(4)]
    imported = tmp_path / "imported"
    out = cli("import", "kineto", "--traces", str(run / "kineto"), "--out", str(imported)).stdout
    assert "clock alignment" in out
    report = json.loads((imported / "import.json").read_text())
    assert report["layout"]["source"] == "pg_config" and report["steps"] == [3, 4, 5, 6]
    ours = slowdown(run / "trace.parquet", run / "meta.yaml", tmp_path / "wi-ours")
    theirs = slowdown(imported / "trace.parquet", imported / "meta.yaml", tmp_path / "wi-imp")
    assert abs(theirs / ours - 1) <= 0.03, (ours, theirs)
