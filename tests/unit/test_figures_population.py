"""Population figures, the figures registry, figures/data.py and the `stragglerlab figures` verb.

Run folders are hand-made in tmp_path (run.json, meta.yaml, faults.json,
whatif/whatif.json; no trace), so every `ours` number can be checked by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from stragglerlab.figures.data import load_figure_data, load_run  # noqa: E402
from stragglerlab.figures.registry import FIGURES, FigureResult, build_figure, figure_names  # noqa: E402
from stragglerlab.util.errors import InputError  # noqa: E402

MINE = ["fig03_waste_cdf", "fig04_step_slowdown_cdf", "fig05_waste_by_optype", "fig06_mw_cdf",
        "fig07_ms_cdf", "fig11_fwd_bwd_correlation", "sim_discrepancy_cdf", "table_s6",
        "table_mitigation"]


def make_run(root: Path, folder: str, scenario: str, seed: int = 0, slowdown: float | None = 1.0,
             step_time: float = 1.0, steps: int = 4, outcome: str = "ok", dp: int = 2,
             pp: int = 2, **whatif_fields) -> Path:
    """Write a fake run folder; slowdown=None writes no whatif.json."""
    d = root / folder
    (d / "whatif").mkdir(parents=True)
    # Step 0 is warm-up (slow, excluded); steps 1..steps are traced.
    step_times = {"0": 10.0 * step_time, **{str(s): step_time for s in range(1, steps + 1)}}
    record = {"name": scenario, "seed": seed, "outcome": outcome,
              "error": None if outcome == "ok" else {"rank": 1, "kind": "crash", "message": "x"},
              "scenario": {"name": scenario, "parallel": {"dp": dp, "pp": pp},
                           "run": {"steps": steps + 1, "warmup_steps": 1, "seed": seed}},
              "step_time_s": step_times,
              "trace": {"complete_steps": list(range(1, steps + 1))}}
    (d / "run.json").write_text(json.dumps(record))
    (d / "meta.yaml").write_text(yaml.safe_dump({"dp_size": dp, "pp_size": pp,
                                                 "trial_name": scenario}))
    (d / "faults.json").write_text(json.dumps(whatif_fields.pop("faults", [])))
    if slowdown is not None:
        w = {"slowdown": slowdown, "waste": 1 - 1 / slowdown,
             "simulation_discrepancy": 1.0, "t_actual_s": step_time,
             "step_time_actual_s": {str(s): step_time for s in range(1, steps + 1)},
             "step_slowdown": {str(s): slowdown for s in range(1, steps + 1)},
             "slowdown_by_optype": {"forward-compute": 1.0}, "m_w": {"rem": 0.0, "add": 0.0},
             "m_s": {"rem": 0.0, "add": 0.0}, "fwd_bwd_correlation": 0.0}
        w.update(whatif_fields)
        (d / "whatif" / "whatif.json").write_text(json.dumps(w))
    return d


def check_images(result: FigureResult, out: Path) -> None:
    names = sorted(Path(p).name for p in result.paths)
    assert names == [f"{result.name}.pdf", f"{result.name}.png"]
    png = out / f"{result.name}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / f"{result.name}.pdf").read_bytes()[:4] == b"%PDF"
    img = imread(png)
    assert np.ptp(img[..., :3]) > 0.2  # not blank
    saved = json.loads((out / f"{result.name}.json").read_text())
    assert saved["name"] == result.name and saved["paper"] == result.paper
    assert saved["ours"] == json.loads(json.dumps(result.ours))
    assert saved["paths"] == [f"{result.name}.png", f"{result.name}.pdf"]
    assert saved["title"] and saved["source"]


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    """Six analysed jobs with known numbers, one failed run and one job without what-if."""
    root = tmp_path_factory.mktemp("runs")
    steps = {"1": 1.0, "2": 1.0, "3": 1.0, "4": 2.0}  # per-step S; job S = 1.25 below
    dirs = [
        # clean job: S 1.0, pure DP
        make_run(root, "a", "clean", slowdown=1.0, pp=1, fwd_bwd_correlation=0.95,
                 simulation_discrepancy=1.01),
        make_run(root, "b", "mild", slowdown=1.05, fwd_bwd_correlation=0.2,
                 simulation_discrepancy=1.02),
        make_run(root, "c", "slow", slowdown=1.25, step_slowdown=steps,
                 m_w={"rem": 0.9, "add": 0.8}, m_s={"rem": 0.1, "add": 0.0},
                 slowdown_by_optype={"forward-compute": 1.15, "backward-compute": 1.05,
                                     "forward-pp-comm": 1.05, "grads-reduce-scatter": 0.99,
                                     "optimizer": 1.05},
                 simulation_discrepancy=1.03),
        make_run(root, "d", "stage", slowdown=1.5, m_w={"rem": 0.2, "add": 0.1},
                 m_s={"rem": 0.8, "add": 0.7},
                 slowdown_by_optype={"params-all-gather": 1.1, "backward-pp-comm": 1.1},
                 simulation_discrepancy=1.04),
        make_run(root, "e", "seq", slowdown=2.0, pp=1, fwd_bwd_correlation=0.97,
                 m_w={"rem": 0.3, "add": 0.2}, simulation_discrepancy=1.06),
        make_run(root, "f", "clean2", slowdown=1.0, simulation_discrepancy=1.08),
        make_run(root, "g", "crash", slowdown=3.0, outcome="failed"),  # failed: not in figures
        make_run(root, "h", "unanalysed", slowdown=None),
    ]
    data = load_figure_data(dirs, None)
    out = tmp_path_factory.mktemp("fig")
    results = {name: build_figure(name, data, out) for name in MINE[:7]}
    return data, out, results


def test_load_figure_data_keeps_failed_runs(population):
    data, _, _ = population
    assert len(data.runs) == 8
    assert [r.scenario for r in data.runs if not r.ok] == ["crash"]
    assert len(data.ok_runs()) == 7
    assert len(data.analysed_runs()) == 6  # 'unanalysed' has no whatif.json
    assert data.by_scenario("crash") == [] and len(data.by_scenario("crash", ok_only=False)) == 1
    run = data.by_scenario("slow")[0]
    assert run.meta.dp_size == 2 and run.seed == 0 and run.whatif["slowdown"] == 1.25
    # Warm-up step 0 (10 s) is excluded from step times.
    assert run.step_times_s() == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    assert run.mean_step_time_s() == 1.0
    assert run.gpu_time_s() == 4 * 4.0  # world_size x sum of traced step times


def test_every_population_figure_writes_png_pdf_json(population):
    _, out, results = population
    for result in results.values():
        check_images(result, out)
        assert re.fullmatch(r"testbed runs \((6|3|2) jobs\)", result.source), result.source


def test_fig03_waste_numbers(population):
    ours = population[2]["fig03_waste_cdf"].ours
    s = np.array([1.0, 1.05, 1.25, 1.5, 2.0, 1.0])
    waste = 1 - 1 / s
    assert ours["jobs"] == 6
    assert ours["straggling_jobs_pct"] == pytest.approx(50.0)  # 1.25, 1.5, 2.0
    # Worker-time weights: world_size (4, or 2 for the pp=1 jobs) x 4 traced steps of 1 s.
    weights = np.array([2, 4, 4, 4, 2, 4]) * 4.0
    assert ours["gpu_time_wasted_pct"] == pytest.approx(
        100 * (waste * weights).sum() / weights.sum(), abs=0.01)
    assert ours["p90_waste_pct"] == pytest.approx(100 * np.percentile(waste, 90), abs=0.01)
    assert ours["p99_waste_pct"] == pytest.approx(100 * np.percentile(waste, 99), abs=0.01)


def test_fig04_step_ratio_numbers(population):
    ours = population[2]["fig04_step_slowdown_cdf"].ours
    # 5 jobs with constant per-step S (ratio 1) + job 'slow': 1/1.25 x3 and 2/1.25.
    ratios = np.array([1.0] * 20 + [0.8, 0.8, 0.8, 1.6])
    assert ours["steps"] == 24
    assert ours["median"] == pytest.approx(np.median(ratios), abs=1e-3)
    assert ours["p90"] == pytest.approx(np.percentile(ratios, 90), abs=1e-3)


def test_fig05_waste_split_by_group(population):
    from stragglerlab.figures.fig05_waste_by_optype import OpGroup, group_waste

    data, _, results = population
    split = group_waste(data.by_scenario("slow")[0])
    waste = 1 - 1 / 1.25
    # excess: compute 0.15 + 0.05, PP 0.05, DP 0 (negative clamped), other 0.05 -> total 0.3
    assert split[OpGroup.COMPUTE] == pytest.approx(waste * 0.2 / 0.3)
    assert split[OpGroup.PP_COMM] == pytest.approx(waste * 0.05 / 0.3)
    assert split[OpGroup.DP_COMM] == 0.0
    assert sum(split.values()) == pytest.approx(waste)
    ours = results["fig05_waste_by_optype"].ours
    assert ours["straggling_jobs"] == 3
    shares = [ours[f"{k}_waste_share_pct"] for k in ("compute", "pp_comm", "dp_comm", "other")]
    assert sum(shares) == pytest.approx(100.0, abs=0.2)


def test_fig06_mw_share_and_mean_s(population):
    ours = population[2]["fig06_mw_cdf"].ours
    # straggling jobs: slow (M_W 0.9, S 1.25), stage (0.2, 1.5), seq (0.3, 2.0)
    assert ours["straggling_jobs"] == 3
    assert ours["mw_gt_0_5_pct"] == pytest.approx(100 / 3, abs=0.01)
    assert ours["mean_s_mw_gt_0_5"] == pytest.approx(1.25)
    assert ours["mean_s_rest"] == pytest.approx(1.75)


def test_fig07_ms_only_pp_jobs(population):
    ours = population[2]["fig07_ms_cdf"].ours
    # 'seq' has pp=1 and is left out: slow (0.1) and stage (0.8)
    assert ours["straggling_pp_jobs"] == 2
    assert ours["ms_ge_0_5_pct"] == pytest.approx(50.0)


def test_fig11_correlation_share(population):
    ours = population[2]["fig11_fwd_bwd_correlation"].ours
    # >= 0.9: clean (S 1.0, 0.95) and seq (S 2.0, 0.97)
    assert ours["corr_ge_0_9_pct"] == pytest.approx(100 / 3, abs=0.01)
    assert ours["mean_s_corr_ge_0_9"] == pytest.approx(1.5)
    # all waste of the 'seq' job (0.5 x 2x1x4 s) over all waste
    s = np.array([1.0, 1.05, 1.25, 1.5, 2.0, 1.0])
    weights = np.array([2, 4, 4, 4, 2, 4]) * 4.0
    wasted = (1 - 1 / s) * weights
    assert ours["waste_share_corr_ge_0_9_pct"] == pytest.approx(
        100 * wasted[4] / wasted.sum(), abs=0.01)


def test_sim_discrepancy_numbers(population):
    ours = population[2]["sim_discrepancy_cdf"].ours
    d = np.array([1, 2, 3, 4, 6, 8], dtype=float)
    assert ours["median_pct"] == pytest.approx(np.median(d))
    assert ours["p90_pct"] == pytest.approx(np.percentile(d, 90))
    assert ours["above_5pct_jobs_pct"] == pytest.approx(100 / 3, abs=0.1)


def test_table_s6_pairs_matching_seeds(tmp_path):
    root = tmp_path / "runs"
    dirs = [
        make_run(root, "c0", "clean-dp2-pp2", seed=0, slowdown=1.05, step_time=1.0),
        make_run(root, "c1", "clean-dp2-pp2", seed=1, slowdown=1.05, step_time=2.0),
        make_run(root, "s0", "slow-worker-1", seed=0, slowdown=1.2, step_time=1.1,
                 faults=[{"kind": "slow-worker", "requested": {"factor": 1.4},
                          "targets": [{"rank": 1, "dp_rank": 1, "stage": 0}],
                          "measured": {"factor": 1.38}}]),
        make_run(root, "s1", "slow-worker-1", seed=1, slowdown=1.3, step_time=2.4),
        make_run(root, "s9", "slow-worker-1", seed=9, slowdown=5.0, step_time=50.0),  # no clean
        # level 3 only has a run of another length: not paired with the 5-step clean runs
        make_run(root, "t0", "slow-worker-3", seed=0, slowdown=2.0, step_time=2.0, steps=8),
    ]
    data = load_figure_data(dirs)
    out = tmp_path / "fig"
    result = build_figure("table_s6", data, out)
    check_images(result, out)
    ours = result.ours
    assert ours["level1_measured"] == pytest.approx((1.1 + 1.2) / 2, abs=1e-3)
    assert ours["level1_estimated"] == pytest.approx(1.25)
    assert ours["level1_error_pct"] == pytest.approx(100 * (1.25 / 1.15 - 1), abs=0.05)
    assert ours["level1_seeds"] == 2
    assert not any(k.startswith(("level2", "level3")) for k in ours)
    md = ours["markdown"].splitlines()
    assert len(md) == 5
    assert "| 1 | slow-worker-1 | 0,1 (2 runs) | 1.40 (1.38) | clean run | 1.15 |" in md[2]
    assert "1.16" in md[2] and "1.21" in md[2]  # the paper's values beside ours
    assert md[4].startswith("| 3 | slow-worker-3 | - |")


def test_table_mitigation_gain(tmp_path):
    root = tmp_path / "runs"
    dirs = [make_run(root, "p", "gc-pauses", seed=3, step_time=1.2),
            make_run(root, "q", "gc-planned", seed=3, step_time=1.0),
            make_run(root, "r", "seq-imbalance", seed=3, step_time=1.0)]
    out = tmp_path / "fig"
    result = build_figure("table_mitigation", load_figure_data(dirs), out)
    check_images(result, out)
    assert result.ours["gc_gain_pct"] == pytest.approx(20.0)
    assert "stage_gain_pct" not in result.ours and "seq_gain_pct" not in result.ours
    assert "+12.6%" in result.ours["markdown"] and "no data" in result.ours["markdown"]


@pytest.mark.parametrize("name", MINE)
def test_no_data_writes_placeholder(tmp_path, name):
    out = tmp_path / "fig"
    result = build_figure(name, load_figure_data([]), out)
    check_images(result, out)
    assert result.ours == {}
    assert result.note.startswith("no data: needs ")


def test_registry_lists_mine_in_order():
    names = figure_names()
    assert [n for n in names if n in MINE] == MINE
    assert len(names) == len(FIGURES.builtin) == len(set(names))
    with pytest.raises(InputError, match="unknown figure"):
        build_figure("fig99_nothing", load_figure_data([]), Path("/nonexistent"))


def test_bad_run_folders_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="run folder not found"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no run.json"):
        load_run(tmp_path / "empty")
    d = make_run(tmp_path, "bad", "x")
    (d / "whatif" / "whatif.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_run(d)
    with pytest.raises(InputError, match="reference traces folder not found"):
        load_figure_data([], tmp_path / "noref")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stragglerlab", *args],
                          capture_output=True, text=True)


def test_verb_missing_folder_exits_2_with_one_line(tmp_path):
    proc = run_cli("figures", "--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run folder not found" in lines[0] and "nope" in lines[0]
    assert "Traceback" not in proc.stderr
    proc = run_cli("figures", "--only", "fig99", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "unknown figure 'fig99'" in proc.stderr


def test_verb_builds_selected_figures(tmp_path):
    d = make_run(tmp_path / "runs", "a", "slow", slowdown=1.5)
    out = tmp_path / "fig"
    proc = run_cli("figures", "--runs", str(d), "--only", "fig03_waste_cdf", "table_s6",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[1/2] fig03_waste_cdf") and "testbed runs (1 jobs)" in lines[0]
    assert lines[1].startswith("[2/2] table_s6") and "no data" in lines[1]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.{ext}" for n in ("fig03_waste_cdf", "table_s6") for ext in ("png", "pdf", "json"))
    assert json.loads((out / "fig03_waste_cdf.json").read_text())["ours"][
        "straggling_jobs_pct"] == 100.0


def test_verb_with_nothing_to_draw_says_so_and_exits_1(tmp_path):
    out = tmp_path / "fig"
    proc = run_cli("figures", "--only", "fig03_waste_cdf", "sim_discrepancy_cdf", "--out",
                   str(out))
    assert proc.returncode == 1, proc.stderr
    assert "nothing to draw" in proc.stderr and "no run folders" in proc.stderr
    assert "--runs" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout.count("no data") >= 2  # each figure's line still says why
    assert (out / "fig03_waste_cdf.png").exists()  # the "no data" images are written
    # Runs without a what-if result: the message says what to run.
    d = make_run(tmp_path / "runs", "a", "slow", slowdown=None)
    proc = run_cli("figures", "--runs", str(d), "--only", "fig03_waste_cdf", "--out", str(out))
    assert proc.returncode == 1 and "stragglerlab whatif --run" in proc.stderr
    # --allow-empty (the workflow's per-figure jobs): the same images, exit 0.
    proc = run_cli("figures", "--runs", str(d), "--only", "fig03_waste_cdf", "--out", str(out),
                   "--allow-empty")
    assert proc.returncode == 0 and "nothing to draw" not in proc.stderr
    # One figure with data among empty ones is a success.
    d = make_run(tmp_path / "runs", "b", "slow", slowdown=1.5)
    proc = run_cli("figures", "--runs", str(d), "--only", "fig03_waste_cdf", "table_s6",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
