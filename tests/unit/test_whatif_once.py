"""Every computation is one DAG step: a run's what-if analysis runs once, in `stragglerlab whatif`.

The whatif verb writes whatif.json; the `whatif` detector (offline) and the
figures that used to re-analyse the trace (table_s6 with the median ideal,
the Fig. 14 heatmaps) read it. The analysis entry points are wrapped to count
calls: one per run, all from the verb. `snakemake -n` on the smoke config
lists exactly one whatif job per run.

    .venv/bin/python -m pytest -q tests/unit/test_whatif_once.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import yaml  # noqa: E402
from snakemake.utils import update_config  # noqa: E402

import stragglerlab.analysis.detectors.whatif_evidence as detector_module  # noqa: E402
import stragglerlab.analysis.whatif as whatif_module  # noqa: E402
from stragglerlab.analysis.detectors.registry import detector_names  # noqa: E402
from stragglerlab.analysis.detectors.whatif_residual import RESIDUAL  # noqa: E402
from stragglerlab.cli import main  # noqa: E402
from stragglerlab.workflow.config import load_workflow_config  # noqa: E402
from stragglerlab.workloads.synthetic import (  # noqa: E402
    SlowWorker,
    SyntheticConfig,
    ground_truth,
    synthesize_trace,
)
from tests.unit.test_figures_traces import scenario, write_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def analyses(monkeypatch):
    """Counter of what-if analyses by trace (`where`), and of the public entry points."""
    calls: Counter = Counter()
    build_graph = whatif_module.build_graph
    run_whatif = whatif_module.run_whatif
    analyze = whatif_module.analyze

    def counting_build_graph(template, meta, where):  # every analysis builds one graph
        calls["residual" if str(where).endswith(RESIDUAL) else Path(where).parent.name] += 1
        return build_graph(template, meta, where)

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            where = kwargs.get("where", args[2] if len(args) > 2 else "")
            # The detector's residual pass analyses another job, simulated without the
            # faults it found (whatif_residual.py): counted apart from the trace's analyses.
            calls["residual" if str(where).endswith(RESIDUAL) else name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(whatif_module, "build_graph", counting_build_graph)
    monkeypatch.setattr(whatif_module, "run_whatif", counting("run_whatif", run_whatif))
    monkeypatch.setattr(whatif_module, "analyze", counting("analyze", analyze))
    monkeypatch.setattr(detector_module, "run_whatif", counting("run_whatif", run_whatif))
    return calls


def _run(root: Path, folder: str, name: str, **kwargs) -> Path:
    cfg = SyntheticConfig(dp_size=2, pp_size=2, n_steps=8, seed=1, **kwargs)
    df, meta = synthesize_trace(cfg)
    sc = scenario(name, dp=2, pp=2, mb=cfg.n_microbatches, dist="fixed")
    steps = sorted(int(s) for s in df["step"].unique())
    extra = {"step_time_s": {str(s): 1.0 + 0.3 * bool(kwargs) for s in steps},
             "trace": {"complete_steps": steps}}
    return write_run(root, folder, sc, df, meta, ground_truth(df, cfg), extra=extra)


def test_one_run_is_analysed_once_by_the_whatif_verb(tmp_path, analyses, capsys):
    clean = _run(tmp_path, "clean", "clean-dp2-pp2")
    slow = _run(tmp_path, "slow", "slow-worker-1",
                slow_workers=(SlowWorker(dp_rank=1, stage=0, factor=1.8),))
    for run in (clean, slow):
        assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert analyses == Counter({"clean": 1, "slow": 1, "run_whatif": 2})
    doc = json.loads((slow / "whatif" / "whatif.json").read_text())
    assert set(doc["compute_ideals"]) == {"mean", "median"}
    assert not (slow / "whatif" / "heatmap.png").exists()  # the heatmap is a figure now

    analyses.clear()
    # Offline the detector reads whatif.json (online it re-analyses its sliding window).
    assert main(["detect", "--run", str(slow), "--detector", "whatif",
                 "--out", str(slow / "detect"), "--quiet"]) == 0
    (finding,) = json.loads((slow / "detect" / "whatif.json").read_text())["findings"]
    assert finding["ranks"] == [{"rank": 1, "dp_rank": 1, "stage": 0}]
    figures = tmp_path / "figures"
    assert main(["figures", "--runs", str(clean), str(slow), "--only", "table_s6",
                 "fig14_heatmaps", "--out", str(figures), "--quiet"]) == 0
    # Nothing downstream of the verb analysed a trace again (the residual job is no trace).
    assert set(analyses) <= {"residual"}

    table = json.loads((figures / "table_s6.json").read_text())["ours"]
    assert table["level1_estimated"] == pytest.approx(round(doc["slowdown"], 3))
    assert table["level1_estimated_median_ideal"] == pytest.approx(
        round(doc["compute_ideals"]["median"]["slowdown"], 3))
    heatmaps = json.loads((figures / "fig14_heatmaps.json").read_text())["ours"]
    assert heatmaps["testbed"]["worker issue"]["cells"] == doc["worker_score"]
    assert (figures / "fig14_heatmaps-worker-issue.png").exists()
    capsys.readouterr()


def _job_counts(out: str) -> dict[str, int]:
    table = out.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^([A-Za-z_]\w*)\s+(\d+)\s*$", table, re.M)}


def test_snakemake_plans_one_whatif_job_per_run(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(ROOT / "config" / "smoke.yaml")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    merged = yaml.safe_load((ROOT / "config" / "workflow.yaml").read_text())
    update_config(merged, yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()))
    runs = load_workflow_config(merged, detector_names()).runs
    counts = _job_counts(out)
    assert counts["whatif"] == len(runs)
    planned = re.findall(r"output: (\S+/whatif/whatif\.json)\n", out)
    assert sorted(planned) == sorted(f"results/{r.key}/whatif/whatif.json" for r in runs)
    # Nothing else analyses a run: one detect rule (offline and online), one rule per figure.
    assert counts["detect"] == 2 * len(runs) * len(detector_names())
    assert "detect_online" not in counts and "figures" not in counts
    assert counts["figure_table_s6"] == counts["figure_fig14_heatmaps"] == 1
