"""Trace-based figures (Fig. 8, 9, 10, 12, 13, 14) on tiny run folders made in tmp_path.

Traces come from workloads/synthetic.py with the testbed's extra columns
(`seq_len_sq_sum`, `gc_pause_s`) filled in by hand, so every `ours` number is
known; Fig. 10's regeneration is checked against sum(seq_len^2) traced by real
runs (tests/data/seq_regen_*.json); Fig. 14's reference cells are checked
against the artifact's result-*.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from stragglerlab.figures import (  # noqa: E402
    fig08_seq_timeline,
    fig09_mb_time_vs_seqsq,
    fig10_seq_len_hist,
    fig12_long_context,
    fig13_gc_timeline,
    fig14_heatmaps,
)
from stragglerlab.figures.data import FigureData, load_figure_data  # noqa: E402
from stragglerlab.figures.registry import FIGURES, build_figure  # noqa: E402
from stragglerlab.trace.trace_io import write_trace  # noqa: E402
from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace  # noqa: E402
from tests.unit.refdata import REFERENCE, reference  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
MINE = [fig08_seq_timeline, fig09_mb_time_vs_seqsq, fig10_seq_len_hist, fig12_long_context,
        fig13_gc_timeline, fig14_heatmaps]
SLOPE_S_PER_TOK2 = 2e-8
"""Fixture cost model: fwd = 5 ms + slope * sum(s^2), bwd = 2 x fwd."""


def scenario(name: str, dp: int, pp: int, mb: int, *, max_seq_len: int = 256,
             dist: str = "longtail", rebalance: bool = False, planned_gc: int = 0) -> dict:
    """A run.json scenario section as `stragglerlab train` records it."""
    return {"name": name,
            "model": {"n_layers": 2, "hidden": 32, "n_heads": 2, "vocab": 64,
                      "max_seq_len": max_seq_len},
            "parallel": {"dp": dp, "pp": pp, "microbatches": mb, "layers_per_stage": None},
            "data": {"tokens_per_microbatch": 256, "length_distribution": dist,
                     "mean_seq_len": 32, "longtail_sigma": 1.2,
                     "rebalance_across_dp": rebalance},
            "run": {"steps": 7, "warmup_steps": 1, "seed": 3,
                    "planned_gc_every": planned_gc}}


def write_run(root: Path, folder: str, sc: dict, df: pd.DataFrame, meta, faults: list,
              whatif: dict | None = None, extra: dict | None = None) -> Path:
    d = root / folder
    d.mkdir(parents=True)
    write_trace(df, meta, d / "trace.parquet")
    meta.dump(d / "meta.yaml")
    (d / "faults.json").write_text(json.dumps(faults))
    record = {"name": sc["name"], "seed": sc["run"]["seed"], "outcome": "ok", "error": None,
              "scenario": sc, "versions": {"python": "3.11", "stragglerlab": "0.1.0"},
              **(extra or {})}
    (d / "run.json").write_text(json.dumps(record))
    if whatif is not None:
        (d / "whatif").mkdir()
        (d / "whatif" / "whatif.json").write_text(json.dumps(whatif))
    return d


def seq_run(root: Path, folder: str = "seq", rebalance: bool = False) -> Path:
    """Pure DP 4 ranks, long-tailed lengths; compute time linear in the regenerated sum(s^2)."""
    sc = scenario("seq-imbalance", dp=4, pp=1, mb=2, rebalance=rebalance)
    df, meta = synthesize_trace(SyntheticConfig(dp_size=4, pp_size=1, n_microbatches=2,
                                                n_steps=6, jitter=0.0))
    _, table = fig10_seq_len_hist.regenerate_lengths(sc, sorted(df["step"].unique()))
    sq = table.set_index(["step", "dp_rank", "mb_id"])["seq_len_sq_sum"]
    key = pd.MultiIndex.from_frame(df[["step", "dp_rank", "mb_id"]])
    compute = df["optype"].isin(["forward-compute", "backward-compute"]).to_numpy()
    df["seq_len_sq_sum"] = np.where(compute, sq.reindex(key).to_numpy(), np.nan)
    fwd_s = 5e-3 + SLOPE_S_PER_TOK2 * df["seq_len_sq_sum"]
    df.loc[df["optype"] == "forward-compute", "duration"] = fwd_s
    df.loc[df["optype"] == "backward-compute", "duration"] = 2 * fwd_s
    fault = {"kind": "seq-imbalance", "targets": [], "first_step": 0, "last_step": None,
             "requested": {"rebalance": rebalance}, "measured": {}}
    return write_run(root, folder, sc, df, meta, [fault])


def gc_run(root: Path, folder: str, planned: int, step_time_s: float) -> Path:
    """DP2 x PP2 with one 120 ms GC pause on rank 3 in step 2 (per-pause record on disk)."""
    sc = scenario("gc-planned" if planned else "gc-pauses", dp=2, pp=2, mb=2, dist="fixed",
                  planned_gc=planned)
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_microbatches=2,
                                                n_steps=4))
    origin = 1000.0
    t_step = float(df.loc[df["step"] == 2, "start_ts"].min())
    extra = {"trace": {"clock_origin_monotonic_s": origin},
             "step_time_s": {str(s): step_time_s for s in range(4)}}
    fault = {"kind": "gc-pauses", "targets": [], "first_step": 0, "last_step": None,
             "requested": {"pause_ms": 100}, "measured": {}}
    d = write_run(root, folder, sc, df, meta, [fault], extra=extra)
    (d / "gc").mkdir()
    for r in range(4):
        rows = [{"step": 1, "start": origin + 0.001, "duration_s": 0.0004, "generation": 0}]
        if r == 3:
            rows.append({"step": 2, "start": origin + t_step + 0.01, "duration_s": 0.12,
                         "generation": 2})
        rows.append({"step": 9, "start": origin + 99.0, "duration_s": 0.5, "generation": 2})
        (d / "gc" / f"rank{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows)
                                                 + '{"step": 3, "sta')  # torn last line
    return d


def whatif_stub(slowdown: float, corr: float | None, scores=None) -> dict:
    return {"slowdown": slowdown, "fwd_bwd_correlation": corr, "t_actual_s": 1.0,
            "worker_score": scores if scores is not None else [[1.0, 1.0]]}


def stub_run(root: Path, folder: str, name: str, whatif: dict, faults: list, **kw) -> Path:
    """A run folder with a small synthetic trace and a hand-written whatif.json."""
    sc = scenario(name, dp=2, pp=2, mb=2, dist="fixed", **kw)
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_microbatches=2,
                                                n_steps=2))
    return write_run(root, folder, sc, df, meta, faults, whatif=whatif)


def check_outputs(result, out: Path) -> dict:
    """png + pdf exist and are not blank; the json beside them holds the same `ours`."""
    png, pdf = out / f"{result.name}.png", out / f"{result.name}.pdf"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes()[:4] == b"%PDF"
    assert np.ptp(imread(png)[..., :3]) > 0.2
    saved = json.loads((out / f"{result.name}.json").read_text())
    assert saved["ours"] == json.loads(json.dumps(result.ours))
    assert saved["paper"] == result.paper and saved["source"] and saved["note"]
    return saved


def test_registered_in_order():
    names = list(FIGURES.builtin)
    mine = [m.NAME for m in MINE]
    assert [n for n in names if n in mine] == mine
    for m in MINE:
        assert m.TITLE and m.PAPER


@pytest.mark.parametrize("module", MINE, ids=lambda m: m.NAME)
def test_no_data_writes_placeholder(module, tmp_path):
    result = build_figure(module.NAME, FigureData(runs=[], reference_dir=None), tmp_path)
    assert result.ours == {} and "no data" in result.note
    assert (tmp_path / f"{module.NAME}.png").exists() and (tmp_path / f"{module.NAME}.pdf").exists()


# --- Fig. 8 -----------------------------------------------------------------------------

def test_per_rank_step_wait_is_gap_to_slowest_compute_end():
    df = pd.DataFrame({
        "stage": 0, "step": 1, "dp_rank": [0, 0, 1, 1],
        "optype": ["forward-compute", "backward-compute"] * 2,
        "start_ts": [0.0, 0.2, 0.0, 0.5], "duration": [0.2, 0.4, 0.5, 1.0],
        "seq_len_sq_sum": [100.0, np.nan, 900.0, np.nan]})
    t = fig08_seq_timeline.per_rank_step(df).set_index("dp_rank")
    assert t.loc[0, "wait_s"] == pytest.approx(0.9) and t.loc[1, "wait_s"] == 0.0
    assert t.loc[0, "compute_s"] == pytest.approx(0.6) and t.loc[1, "seq_sq"] == 900.0
    assert fig08_seq_timeline.window(pd.Series([1.0, 3.0, 2.0, 1.0], index=[4, 5, 6, 7]),
                                     2) == [5, 6]


def test_fig08_on_seq_run(tmp_path):
    data = load_figure_data([seq_run(tmp_path / "runs"),
                             seq_run(tmp_path / "runs", "seq-rebal", rebalance=True)])
    out = tmp_path / "fig"
    result = build_figure(fig08_seq_timeline.NAME, data, out)
    ours = check_outputs(result, out)["ours"]
    assert ours["run"] == "seq-imbalance/3" and ours["dp_size"] == 4
    assert len(ours["steps_shown"]) == fig08_seq_timeline.N_STEPS
    assert np.diff(ours["steps_shown"]).tolist() == [1, 1]
    # Compute time is linear in sum(s^2) in the fixture: they correlate perfectly.
    assert ours["compute_vs_seq_sq_pearson"] == pytest.approx(1.0, abs=1e-9)
    assert ours["compute_imbalance_mean"] > 1.0 and ours["max_wait_ms_mean"] > 0


# --- Fig. 9 -----------------------------------------------------------------------------

def test_linear_fit_recovers_slope_and_r2():
    x = np.array([1e5, 2e5, 4e5, 8e5])
    fit = fig09_mb_time_vs_seqsq.linear_fit(x, 0.01 + 3e-8 * x)
    assert fit.slope_ms_per_mtok2 == pytest.approx(30.0) and fit.intercept_ms == pytest.approx(10)
    assert fit.r2 == pytest.approx(1.0)
    noisy = fig09_mb_time_vs_seqsq.linear_fit(x, np.array([0.02, 0.01, 0.03, 0.01]))
    assert noisy.r2 < 0.5
    assert fig09_mb_time_vs_seqsq.linear_fit(np.full(4, 5.0), np.arange(4.0)) is None


def test_fig09_on_seq_run(tmp_path):
    fixed = stub_run(tmp_path / "runs", "clean", "clean-dp2-pp2", whatif_stub(1.0, 0.0), [])
    data = load_figure_data([seq_run(tmp_path / "runs"), fixed])
    out = tmp_path / "fig"
    ours = check_outputs(build_figure(fig09_mb_time_vs_seqsq.NAME, data, out), out)["ours"]
    assert list(ours) == ["seq-imbalance/3"]  # fixed-length runs are not fitted
    fit = ours["seq-imbalance/3"]
    assert fit["slope_ms_per_mtok2"] == pytest.approx(3 * SLOPE_S_PER_TOK2 * 1e9, rel=1e-6)
    assert fit["intercept_ms"] == pytest.approx(15.0, rel=1e-6)
    assert fit["r2"] == pytest.approx(1.0) and fit["n_microbatches"] == 6 * 4 * 2


# --- Fig. 10 ----------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", ["seq_regen_unbalanced", "seq_regen_rebalanced"])
def test_regenerated_sqsum_equals_real_trace(fixture):
    """sum(seq_len^2) regenerated from run.json equals what a real run traced."""
    doc = json.loads((DATA / f"{fixture}.json").read_text())
    traced = pd.DataFrame(doc["microbatches"]["rows"], columns=doc["microbatches"]["columns"])
    traced["optype"], traced["stage"] = "forward-compute", 0
    steps = sorted(traced["step"].unique())
    _, table = fig10_seq_len_hist.regenerate_lengths(doc["scenario"], steps)
    assert fig10_seq_len_hist.check_against_trace(traced, table) == (len(traced), 0)
    # The check can fail: another seed draws other lengths.
    other = json.loads(json.dumps(doc["scenario"]))
    other["run"]["seed"] += 1
    _, wrong = fig10_seq_len_hist.regenerate_lengths(other, steps)
    checked, bad = fig10_seq_len_hist.check_against_trace(traced, wrong)
    assert checked == len(traced) and bad > len(traced) // 2


def test_length_stats():
    s = fig10_seq_len_hist.length_stats(np.array([1] * 9 + [91]))
    assert s["n_sequences"] == 10 and s["median_len"] == 1.0 and s["max_len"] == 91.0
    assert s["token_share_longest_10pct"] == pytest.approx(0.91)


def test_fig10_on_seq_run(tmp_path):
    data = load_figure_data([seq_run(tmp_path / "runs")])
    out = tmp_path / "fig"
    ours = check_outputs(build_figure(fig10_seq_len_hist.NAME, data, out), out)["ours"]
    assert ours["regenerated_matches_trace"] is True
    assert ours["microbatches_checked"] == 6 * 4 * 2 and ours["microbatches_mismatched"] == 0
    assert ours["max_len"] <= 256 and ours["median_len"] < ours["p90_len"] <= ours["max_len"]
    assert ours["length_distribution"] == "longtail"


# --- Fig. 12 ----------------------------------------------------------------------------

def test_fig12_groups_by_max_seq_len(tmp_path):
    root = tmp_path / "runs"
    seq_fault = [{"kind": "seq-imbalance", "targets": []}]
    runs = [
        stub_run(root, "a", "seq-imbalance", whatif_stub(1.4, 0.95), seq_fault, max_seq_len=2048),
        stub_run(root, "b", "seq-imbalance", whatif_stub(1.2, 0.85), seq_fault, max_seq_len=2048),
        stub_run(root, "c", "seq-rebalanced", whatif_stub(1.0, 0.2), seq_fault,
                 max_seq_len=2048, rebalance=True),  # a mitigation: left out
        stub_run(root, "d", "clean", whatif_stub(1.02, 0.1), []),
        stub_run(root, "e", "slow", whatif_stub(1.3, None), []),
    ]
    out = tmp_path / "fig"
    ours = check_outputs(build_figure(fig12_long_context.NAME, load_figure_data(runs), out),
                         out)["ours"]
    lc, other = ours["long-context"], ours["other"]
    assert lc["jobs"] == 2 and lc["mean_S"] == pytest.approx(1.3)
    assert lc["corr_ge_0_9_pct"] == 50.0 and lc["mean_fwd_bwd_corr"] == pytest.approx(0.9)
    assert other["jobs"] == 2 and other["median_S"] == pytest.approx(1.16)
    assert other["straggling_pct"] == 50.0 and other["mean_fwd_bwd_corr"] == pytest.approx(0.1)


# --- Fig. 13 ----------------------------------------------------------------------------

def test_fig13_gc_pauses_and_planned_gain(tmp_path):
    auto = gc_run(tmp_path / "runs", "auto", planned=0, step_time_s=0.5)
    plan = gc_run(tmp_path / "runs", "plan", planned=3, step_time_s=0.4)
    out = tmp_path / "fig"
    ours = check_outputs(build_figure(fig13_gc_timeline.NAME, load_figure_data([auto, plan]),
                                      out), out)["ours"]
    a = ours["gc-pauses"]
    assert a["long_pauses"] == 1 and a["long_pause_ms_mean"] == 120.0
    assert a["steps_with_long_pause"] == 1 and a["ranks_pausing_per_hit_step"] == 1.0
    assert a["steps"] == 4 and a["world_size"] == 4
    assert ours["gc-planned"]["run"] == "gc-planned/3"
    assert ours["planned_gc_throughput_gain_pct"] == pytest.approx(25.0)


def test_gc_pauses_from_records_and_from_trace_column(tmp_path):
    d = gc_run(tmp_path, "auto", planned=0, step_time_s=0.5)
    run = load_figure_data([d]).runs[0]
    df = run.trace().copy()
    df["optype"] = df["optype"].astype(str)
    p = fig13_gc_timeline.gc_pauses(run, df)
    assert sorted(p["step"].unique()) == [1, 2]  # step 9 is not traced
    big = p[p["duration_s"] > 0.1].iloc[0]
    t_step = float(df.loc[df["step"] == 2, "start_ts"].min())
    assert big["rank"] == 3 and big["start_s"] == pytest.approx(t_step + 0.01)
    # Without the per-pause records: the compute ops' gc_pause_s column.
    import shutil
    shutil.rmtree(d / "gc")
    df["gc_pause_s"] = 0.0
    row = df.index[(df["optype"] == "backward-compute") & (df["rank"] == 1) & (df["step"] == 3)][0]
    df.loc[row, "gc_pause_s"] = 0.2
    fallback = fig13_gc_timeline.gc_pauses(run, df)
    assert fallback[["rank", "step", "duration_s"]].values.tolist() == [[1, 3, 0.2]]


# --- Fig. 14 ----------------------------------------------------------------------------

def test_artifact_cells_is_min_of_decompositions():
    result = {"job_meta": {"dp_size": 2, "pp_size": 3},
              "blocking_decompose_by_dp_rank": {"0": 1.5, "1": 1.0},
              "blocking_decompose_by_stage": {"0": 2.0, "1": 1.2, "2": 0.9}}
    np.testing.assert_allclose(fig14_heatmaps.artifact_cells(result),
                               [[1.5, 1.0], [1.2, 1.0], [0.9, 0.9]])


def _expected_reference_cells(job: str) -> np.ndarray:
    """The artifact's heatmap cells, straight from its result JSON."""
    res = json.loads(reference(f"result-{job}.json").read_text())
    dp, pp = res["job_meta"]["dp_size"], res["job_meta"]["pp_size"]
    by_dp, by_st = res["blocking_decompose_by_dp_rank"], res["blocking_decompose_by_stage"]
    return np.array([[min(by_dp[str(d)], by_st[str(p)]) for d in range(dp)] for p in range(pp)])


def analyse_reference(root: Path) -> Path:
    """The reference traces' what-if results in root/<job>/whatif.json, as the workflow's
    whatif_reference rule writes them."""
    from stragglerlab.cli import main

    for job in ("AR", "ST"):
        assert main(["whatif", "--trace", str(reference(f"trace-{job}.parquet")),
                     "--meta", str(reference(f"meta-{job}.yaml")),
                     "--out", str(root / job), "--quiet"]) == 0
    return root


def test_fig14_reference_cells_equal_artifact(tmp_path, capsys):
    reference("trace-AR.parquet")
    ref_whatif = analyse_reference(tmp_path / "reference")
    root = tmp_path / "runs"
    slow = stub_run(root, "slow", "slow-worker-3", whatif_stub(1.5, 0.0, [[1.0, 1.6],
                                                                           [0.95, 0.95]]),
                    [{"kind": "slow-worker", "targets": [{"rank": 1, "dp_rank": 1, "stage": 0}]}])
    stage = stub_run(root, "stage", "stage-imbalance", whatif_stub(1.2, 0.0, [[1.0, 1.0],
                                                                             [1.2, 1.25]]),
                     [{"kind": "stage-imbalance", "targets": [], "requested": {}}])
    rebal = stub_run(root, "rebal", "stage-rebalanced", whatif_stub(1.9, 0.0, [[1.9, 1.0],
                                                                              [1.0, 1.0]]),
                     [{"kind": "stage-imbalance", "targets": [],
                       "requested": {"rebalance": True}}])
    data = load_figure_data([slow, stage, rebal], REFERENCE, reference_whatif_dir=ref_whatif)
    out = tmp_path / "fig"
    result = build_figure(fig14_heatmaps.NAME, data, out)
    ours = check_outputs(result, out)["ours"]
    for job in ("AR", "ST"):
        got = np.array(ours["reference"][job]["cells"])
        np.testing.assert_allclose(got, _expected_reference_cells(job), rtol=1e-4, atol=1e-9)
        assert ours["reference"][job]["matches_artifact"] is True
        assert (out / f"{fig14_heatmaps.NAME}-reference-{job}.png").exists()
    assert ours["reference"]["AR"]["max_cell_dp_rank"] == 0
    assert ours["reference"]["AR"]["max_cell_stage"] == 0
    assert ours["reference"]["ST"]["max_cell_stage"] == 3
    tb = ours["testbed"]
    assert set(tb) == {"worker issue", "stage imbalance"}  # no seq-imbalance run given
    assert tb["worker issue"]["max_cell_dp_rank"] == 1 and tb["worker issue"]["max_cell"] == 1.6
    assert tb["stage imbalance"]["run"] == "stage-imbalance/3"  # the mitigated run is not used
    assert "sequence imbalance" in result.note


def test_fig14_reference_without_its_whatif_says_which_command_to_run(tmp_path):
    reference("trace-AR.parquet")
    seq = stub_run(tmp_path / "runs", "seq", "seq-imbalance",
                   whatif_stub(1.3, 0.9, [[1.1, 1.3]]), [{"kind": "seq-imbalance"}])
    data = load_figure_data([seq], REFERENCE, reference_whatif_dir=tmp_path / "reference")
    result = build_figure(fig14_heatmaps.NAME, data, tmp_path / "fig")
    assert "reference" not in result.ours and "testbed" in result.ours
    assert "trace-AR has no what-if result; run `stragglerlab whatif --trace" in result.note
    assert str(tmp_path / "reference" / "AR") in result.note


def test_fig14_testbed_only_without_reference(tmp_path):
    seq = stub_run(tmp_path / "runs", "seq", "seq-imbalance",
                   whatif_stub(1.3, 0.9, [[1.1, 1.3]]), [{"kind": "seq-imbalance"}])
    out = tmp_path / "fig"
    result = build_figure(fig14_heatmaps.NAME, load_figure_data([seq]), out)
    assert "reference" not in result.ours
    assert result.ours["testbed"]["sequence imbalance"]["cells"] == [[1.1, 1.3]]
    assert (out / f"{fig14_heatmaps.NAME}-sequence-imbalance.png").exists()

