"""The Snakemake workflow for real on the smoke config (slow tier).

Runs config/smoke.yaml (clean, slow worker, crash; 8 steps each) end to end
into a temporary working directory, then checks: the report exists, every
figure was built by its own rule and the crashed run was recorded and
analysed; a second run right after does nothing; deleting one run's trace
reruns only what depends on it; `snakemake -n` on the
default config lists the full DAG in seconds.

    .venv/bin/python -m pytest -m slow tests/e2e/test_workflow.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from stragglerlab.analysis.detectors.registry import detector_names
from stragglerlab.figures.registry import figure_names
from stragglerlab.workflow.config import load_workflow_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIGURES = figure_names()


def snakemake(workdir: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(workdir), *args],
        capture_output=True, text=True, timeout=timeout)


def smoke(workdir: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return snakemake(workdir, "--cores", "2", "--configfile",
                     str(ROOT / "config" / "smoke.yaml"), *args, **kw)


def job_counts(dry_run_output: str) -> dict[str, int]:
    """rule -> job count from the 'Job stats' table of a dry run."""
    table = dry_run_output.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^([A-Za-z_]\w*)\s+(\d+)\s*$", table, re.M)
            if m.group(1) != "total"}


@pytest.fixture(scope="module")
def smoke_runs() -> list[str]:
    merged = yaml.safe_load((ROOT / "config" / "workflow.yaml").read_text())
    update_config(merged, yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()))
    return [r.key for r in load_workflow_config(merged, detector_names()).runs]


@pytest.fixture(scope="module")
def done(tmp_path_factory, smoke_runs) -> Path:
    workdir = tmp_path_factory.mktemp("workflow")
    proc = smoke(workdir)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return workdir


def test_smoke_workflow_produces_the_report(done, smoke_runs):
    res = done / "results"
    assert (res / "report.md").stat().st_size > 0
    html = (res / "report.html").read_text()
    assert "<img" in html and "data:image/png;base64," in html  # figures embedded
    scores = json.loads((res / "scores.json").read_text())
    assert set(detector_names()) <= set(scores)
    for name in FIGURES:  # one rule per figure
        assert (res / "figures" / f"{name}.json").is_file(), name
        assert (res / "logs" / "figures" / f"{name}.log").is_file(), name
    for key in smoke_runs:
        run = res / key
        assert (run / "whatif" / "whatif.json").is_file(), key
        assert (run / "detect" / "whatif-online.json").is_file(), key
        assert not (run / "whatif" / "heatmap.png").exists(), key  # a figure now
        assert (res / "logs" / "train" / f"{key}.log").is_file(), key
    crashed = [k for k in smoke_runs if "crash" in k]
    assert crashed
    for key in crashed:  # failed by design, recorded, still analysed
        record = json.loads((res / key / "run.json").read_text())
        assert record["outcome"] == "failed" and record["error"]["kind"]
        assert json.loads((res / key / "whatif" / "whatif.json").read_text())["slowdown"] > 0


def test_second_run_does_nothing(done):
    proc = smoke(done, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_deleting_one_trace_reruns_only_what_depends_on_it(done, smoke_runs):
    victim = next(k for k in smoke_runs if "slow-worker" in k)
    others = [k for k in smoke_runs if k != victim]
    res = done / "results"
    before = {k: (res / k / "whatif" / "whatif.json").stat().st_mtime_ns for k in others}
    (res / victim / "trace.parquet").unlink()

    dry = smoke(done, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    out = dry.stdout + dry.stderr
    n_det = len(detector_names())
    # Every figure reads the run's record or trace, so each figure rule reruns once; the
    # reference traces' what-if and the other runs' jobs do not.
    assert job_counts(out) == {"train": 1, "whatif": 1, "detect": 2 * n_det, "score": 1,
                               "report": 1, "all": 1, **{f"figure_{n}": 1 for n in FIGURES}}
    scenario, seed = victim.split("/")
    assert set(re.findall(r"wildcards: (.*)", out)) == {
        f"scenario={scenario}, seed={seed}"} | {
        f"scenario={scenario}, seed={seed}, detector={d}, mode={m}"
        for d in detector_names() for m in ("", "-online")}

    proc = smoke(done)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert (res / victim / "trace.parquet").is_file()
    assert before == {k: (res / k / "whatif" / "whatif.json").stat().st_mtime_ns for k in others}
    assert "Nothing to be done" in (lambda p: p.stdout + p.stderr)(smoke(done, "-n"))


def test_default_dag_lists_in_seconds(tmp_path):
    t0 = time.monotonic()
    proc = snakemake(tmp_path, "-n", timeout=120)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = job_counts(proc.stdout + proc.stderr)
    merged = yaml.safe_load((ROOT / "config" / "workflow.yaml").read_text())
    n_runs = len(load_workflow_config(merged, detector_names()).runs)
    assert counts["train"] == counts["whatif"] == n_runs >= 24
    assert counts["detect"] == 2 * n_runs * len(detector_names())  # offline and online
    assert counts["score"] == counts["report"] == 1
    assert all(counts[f"figure_{n}"] == 1 for n in FIGURES)
    assert wall < 30, f"snakemake -n took {wall:.1f}s"
    assert not (tmp_path / "results").exists()  # a dry run writes nothing
