"""`stragglerlab plot` on every kind of analysed folder, the shared drawing of
figures/job_pictures.py (Job.heatmap / Job.step_plot), and `whatif --timelines`'
one-file timeline (traced + ideal, P2P flows, the per-step slowdown counter)."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import stragglerlab  # noqa: E402
import stragglerlab.analysis.whatif as whatif_module  # noqa: E402
from stragglerlab.cli import main  # noqa: E402
from stragglerlab.figures.job_pictures import (  # noqa: E402
    heatmap_figure,
    job_series,
    step_slowdown_figure,
)
from stragglerlab.method.p2p_pairs import p2p_pair_rows  # noqa: E402
from stragglerlab.run.whatif_reader import read_whatif_summary  # noqa: E402
from stragglerlab.trace.trace_io import read_trace  # noqa: E402
from tests.unit.refdata import reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slow-worker"
KINETO = ROOT / "examples" / "kineto-dp2-pp2"
PICTURES = ["heatmap.png", "heatmap.pdf", "heatmap.json", "step-slowdown.png",
            "step-slowdown.pdf", "step-slowdown.json"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def plot(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["plot", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def check_pictures(out: Path, stdout: str) -> tuple[dict, dict]:
    """Every picture written, non-empty and a real PNG / PDF, its path printed on stdout;
    returns the two JSON sidecars."""
    assert stdout.split() == [str(out / name) for name in PICTURES]
    for name in PICTURES:
        assert (out / name).stat().st_size > 0, name
    for name in ("heatmap.png", "step-slowdown.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
        assert (out / name).stat().st_size > 5_000, name  # a drawing, not an empty canvas
    for name in ("heatmap.pdf", "step-slowdown.pdf"):
        assert (out / name).read_bytes()[:5] == b"%PDF-", name
    heat = json.loads((out / "heatmap.json").read_text())
    steps = json.loads((out / "step-slowdown.json").read_text())
    assert heat["schema"] == steps["schema"] == "stragglerlab.plot/1"
    assert heat["paths"] == ["heatmap.png", "heatmap.pdf"]
    return heat, steps


def hottest(heat: dict) -> tuple[int, int]:
    w = heat["hottest_worker"]
    return w["dp_rank"], w["stage"]


def test_run_folder_reuses_its_whatif_json(tmp_path, capsys, monkeypatch):
    run = tmp_path / "slow-worker-1" / "0"
    shutil.copytree(EXAMPLE, run)
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    capsys.readouterr()
    doc = json.loads((run / "whatif" / "whatif.json").read_text())

    def no_analysis(*a, **k):
        raise AssertionError("plot re-analysed a job that has its whatif.json")

    monkeypatch.setattr(whatif_module, "analyze", no_analysis)
    rc, out, err = plot(capsys, "--run", str(run))
    assert rc == 0, err
    heat, steps = check_pictures(run / "plot", out)  # --out defaults to RUN/plot
    assert "whatif/whatif.json" in err  # progress on stderr says what it drew
    mean = doc["compute_ideals"]["mean"]
    assert np.asarray(heat["worker_score"]) == pytest.approx(np.asarray(mean["worker_score"]))
    assert hottest(heat) == (1, 1)  # the slowed worker of the example
    assert heat["slowdown"] == pytest.approx(mean["slowdown"])
    assert steps["steps"] == doc["steps"] == list(range(8))
    assert steps["step_slowdown"] == pytest.approx([mean["step_slowdown"][str(s)]
                                                    for s in doc["steps"]])
    # --quiet silences progress only; the paths still print. --compute-ideal picks the block.
    rc, out, err = plot(capsys, "--run", str(run), "--quiet", "--compute-ideal", "median",
                        "--out", str(tmp_path / "median"))
    assert rc == 0 and err == ""
    heat, _ = check_pictures(tmp_path / "median", out)
    assert heat["compute_ideal"] == "median"
    assert np.asarray(heat["worker_score"]) == pytest.approx(
        np.asarray(doc["compute_ideals"]["median"]["worker_score"]))


def test_imported_kineto_folder(tmp_path, capsys):
    imported = tmp_path / "kineto"
    assert main(["import", "kineto", "--traces", str(KINETO), "--out", str(imported),
                 "--quiet"]) == 0
    capsys.readouterr()
    rc, out, err = plot(capsys, "--run", str(imported), "--quiet")
    assert rc == 0, err
    heat, steps = check_pictures(imported / "plot", out)
    assert np.asarray(heat["worker_score"]).shape == (2, 2)  # pp=2 x dp=2
    assert steps["steps"] == [1, 2, 3]  # ProfilerStep#1-#3
    assert heat["slowdown"] == pytest.approx(1.059, abs=0.01)  # examples/README.md
    assert hottest(heat) == (1, 1)


def test_trace_and_meta_pair(tmp_path, capsys):
    trace = tmp_path / "trace-PP.parquet"
    meta = tmp_path / "meta-PP.yaml"
    shutil.copy(ROOT / "tests" / "data" / "testbed" / "pure-pp" / "trace.parquet", trace)
    shutil.copy(ROOT / "tests" / "data" / "testbed" / "pure-pp" / "meta.yaml", meta)
    rc, out, err = plot(capsys, "--trace", str(trace), "--meta", str(meta), "--out",
                        str(tmp_path / "out"))
    assert rc == 0, err
    heat, steps = check_pictures(tmp_path / "out", out)
    _, job_meta = read_trace(trace, meta)
    assert np.asarray(heat["worker_score"]).shape == (job_meta.pp_size, job_meta.dp_size)
    assert len(steps["steps"]) == len(steps["step_slowdown"]) >= 1
    # The step times hold together: simulated = ideal x S per step.
    assert np.asarray(steps["step_time_simulated_s"]) == pytest.approx(
        np.asarray(steps["step_time_ideal_s"]) * np.asarray(steps["step_slowdown"]))


def test_artifact_trace_pair(tmp_path, capsys):
    trace, meta = reference("trace-ST.parquet"), reference("meta-ST.yaml")
    rc, out, err = plot(capsys, "--trace", str(trace), "--meta", str(meta), "--out",
                        str(tmp_path / "st"), "--quiet")
    assert rc == 0, err
    heat, _ = check_pictures(tmp_path / "st", out)
    cells = np.asarray(heat["worker_score"])
    assert cells.shape == (4, 2)
    assert cells[3] == pytest.approx([1.17, 1.18], abs=0.01)  # the artifact's hot last stage


def test_synth_folder(tmp_path, capsys):
    synth = tmp_path / "synth"
    assert main(["synth", "--out", str(synth), "--dp", "2", "--pp", "2", "--microbatches",
                 "2", "--steps", "3", "--slow", "0,1,1.8", "--quiet"]) == 0
    capsys.readouterr()
    rc, out, err = plot(capsys, "--run", str(synth), "--out", str(tmp_path / "pics"))
    assert rc == 0, err
    assert "analysing" in err  # no whatif.json there: analysed, and said so
    heat, steps = check_pictures(tmp_path / "pics", out)
    assert hottest(heat) == (0, 1)
    assert heat["worker_score"][1][0] > 1.1
    assert steps["steps"] == [0, 1, 2]
    assert not (synth / "plot").exists()  # --out given: nothing in the folder


def test_whatif_file_alone_and_bad_input(tmp_path, capsys):
    assert main(["whatif", "--run", str(EXAMPLE), "--out", str(tmp_path / "w"),
                 "--quiet"]) == 0
    capsys.readouterr()
    rc, out, err = plot(capsys, "--whatif", str(tmp_path / "w" / "whatif.json"), "--out",
                        str(tmp_path / "p"), "--quiet")
    assert rc == 0, err
    check_pictures(tmp_path / "p", out)

    rc, out, err = plot(capsys)
    assert rc == 2 and "--run DIR" in err and out == ""
    rc, _, err = plot(capsys, "--trace", str(EXAMPLE / "trace.parquet"))
    assert rc == 2 and "needs --out DIR" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = plot(capsys, "--run", str(tmp_path / "empty"))
    assert rc == 2 and "neither whatif/whatif.json nor trace.parquet" in err
    assert not (tmp_path / "empty" / "plot").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    rc, _, err = plot(capsys, "--whatif", str(bad), "--out", str(tmp_path / "b"))
    assert rc == 2 and "bad.json" in err and "Traceback" not in err


def test_api_draws_the_same_pictures(tmp_path):
    job = stragglerlab.open(EXAMPLE)
    fig = job.step_plot(tmp_path / "steps.png")
    top, bottom = fig.axes[:2]
    assert top.get_ylabel() == "step time (s)" and bottom.get_ylabel() == "slowdown S"
    s_line = next(line for line in bottom.get_lines() if line.get_label() == "S per step")
    series = job_series(job.whatif().summary())
    assert list(s_line.get_xdata()) == list(range(8))
    assert s_line.get_ydata() == pytest.approx(job.steps()["slowdown"].to_numpy())
    assert s_line.get_ydata() == pytest.approx(series.step_slowdown)
    assert (tmp_path / "steps.png").read_bytes()[:8] == PNG_MAGIC
    heat = job.heatmap(tmp_path / "heat.png")
    cells = [t.get_text() for t in heat.axes[0].texts]
    assert "1.23" in cells and len(cells) == 8  # one annotation per worker, the hot one
    assert (tmp_path / "heat.png").stat().st_size > 0
    # A whatif.json draws what the result it was written from draws.
    assert main(["whatif", "--run", str(EXAMPLE), "--out", str(tmp_path / "w"),
                 "--quiet"]) == 0
    record = read_whatif_summary(tmp_path / "w" / "whatif.json")
    # The file's summary holds the result's own numbers: the same floats, not near them.
    assert job_series(record).step_slowdown.tolist() == series.step_slowdown.tolist()
    assert job_series(record).step_time_ideal_s.tolist() == series.step_time_ideal_s.tolist()
    assert job_series(record).worker_score.tolist() == series.worker_score.tolist()
    assert [t.get_text() for t in heatmap_figure(record).axes[0].texts] == cells
    assert len(step_slowdown_figure(record, title="x").axes) >= 2


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_whatif_timeline_holds_traced_ideal_flows_and_counter(tmp_path, capsys):
    out = tmp_path / "w"
    assert main(["whatif", "--run", str(EXAMPLE), "--out", str(out), "--timelines",
                 "--quiet"]) == 0
    capsys.readouterr()
    doc = json.loads((out / "whatif.json").read_text())
    assert (out / "ideal-timeline.json.gz").stat().st_size > 0  # the ideal alone, as before
    with gzip.open(out / "timeline.json.gz", "rt") as f:
        trace = json.load(f)
    events, other = trace["traceEvents"], trace["otherData"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    workers = [f"DP {d} / PP {p}" for d in range(2) for p in range(4)]
    assert sorted(n for n in names.values() if n.startswith("traced ")) == \
        sorted(f"traced {w}" for w in workers)
    assert sorted(n for n in names.values() if n.startswith("ideal ")) == \
        sorted(f"ideal {w}" for w in workers)
    xs = [e for e in events if e["ph"] == "X"]
    traced = [e for e in xs if names[e["pid"]].startswith("traced ")]
    ideal = [e for e in xs if names[e["pid"]].startswith("ideal ")]
    df, _ = read_trace(EXAMPLE / "trace.parquet", EXAMPLE / "meta.yaml")
    assert len(traced) == len(df)
    # One ideal copy per traced step, starting where that step starts.
    per_step = defaultdict(list)
    for e in ideal:
        per_step[e["args"]["step"]].append(e)
    assert sorted(per_step) == doc["steps"] and other["ideal"]["copies"] == 8
    assert len({len(v) for v in per_step.values()}) == 1
    for step, evs in per_step.items():
        assert min(e["ts"] for e in evs) == pytest.approx(
            min(e["ts"] for e in traced if e["args"]["step"] == step))
        # The ideal step is shorter than the traced one (the slow worker is gone).
        assert max(e["ts"] + e["dur"] for e in evs) < max(
            e["ts"] + e["dur"] for e in traced if e["args"]["step"] == step)

    # The counter: each step's S (whatif.json's) from that step's start.
    counter = [e for e in events if e["ph"] == "C"]
    assert all(e["pid"] == other["counter"]["pid"] for e in counter)
    assert names[other["counter"]["pid"]] == "per-step slowdown S"
    assert [e["args"]["S"] for e in counter[:-1]] == pytest.approx(
        [doc["step_slowdown"][str(s)] for s in doc["steps"]])
    assert [e["ts"] for e in counter] == sorted(e["ts"] for e in counter)

    # Flows: every send of the trace starts exactly one arrow, which ends on its paired recv.
    slices = defaultdict(list)
    for e in xs:
        slices[(e["pid"], e["tid"])].append(e)

    def enclosing(e: dict) -> dict:
        hits = [x for x in slices[(e["pid"], e["tid"])]
                if x["ts"] <= e["ts"] <= x["ts"] + x["dur"]]
        assert len(hits) == 1, e
        return hits[0]

    flows = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            flows[e["id"]][e["ph"]] = e
    assert all(set(f) == {"s", "f"} for f in flows.values())
    assert all(f["f"].get("bp") == "e" and f["s"]["cat"] == f["f"]["cat"] == "p2p"
               for f in flows.values())
    pairs = p2p_pair_rows(df)
    traced_flows = [f for f in flows.values() if names[f["s"]["pid"]].startswith("traced ")]
    assert len(traced_flows) == len(pairs) == (df["optype"].str.endswith("-send")).sum()
    sends_seen = set()
    for f in flows.values():
        send, recv = enclosing(f["s"]), enclosing(f["f"])
        direction = send["name"].split("-")[0]
        assert send["name"] == f"{direction}-send" and recv["name"] == f"{direction}-recv"
        assert f["s"]["name"] == f"{direction} p2p"
        s_worker = names[send["pid"]].split(" ", 1)[1]
        r_worker = names[recv["pid"]].split(" ", 1)[1]
        s_dp, s_pp = int(s_worker.split()[1]), int(s_worker.split()[-1])
        r_dp, r_pp = int(r_worker.split()[1]), int(r_worker.split()[-1])
        assert r_dp == s_dp and r_pp == s_pp + (1 if direction == "forward" else -1)
        assert send["args"]["seq_id"] == recv["args"]["seq_id"]
        assert send["args"]["step"] == recv["args"]["step"]
        assert f["f"]["ts"] >= f["s"]["ts"]  # the data lands after it leaves
        key = (send["pid"], send["tid"], send["ts"])
        assert key not in sends_seen  # one arrow per send
        sends_seen.add(key)
