"""Outputs that would destroy inputs, and inputs counted twice.

Each test writes one mistake and asserts one clear error (exit 2, the path named) and
that nothing the command read was changed: an input named like an output in the --out
folder, a new trace written over another job's, a run folder listed twice, and a worker
slowed twice by `synth`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.cli.common import inputs_not_overwritten
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace
from tests.unit.cli_errors import one_error as _one_error
from tests.unit.monitor_helpers import synth

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto" / "dp2-pp2"
SCORES = Path(__file__).resolve().parents[1] / "data" / "scores_small.json"


@pytest.fixture
def run(tmp_path) -> Path:
    """A small synth run folder, analysed (whatif/whatif.json)."""
    folder = synth(tmp_path / "run", "--steps", "3", "--slow", "1,1,2.0")
    assert main(["whatif", "--run", str(folder), "--quiet"]) == 0
    return folder


# --- B1: an input named like an output is never overwritten -------------------------


@pytest.mark.parametrize("flag,name", [("--trace", "whatif.json"),
                                       ("--trace", "artifact-format/result.json"),
                                       ("--trace", "timeline.json.gz"),  # removed as stale
                                       ("--meta", "whatif.json")])
def test_whatif_refuses_an_input_it_would_write_over(tmp_path, capsys, run, flag, name):
    out = tmp_path / "ow"
    target = out / name
    target.parent.mkdir(parents=True)
    shutil.copy(run / ("trace.parquet" if flag == "--trace" else "meta.yaml"), target)
    before = target.read_bytes()
    inputs = {"--trace": str(run / "trace.parquet"), "--meta": str(run / "meta.yaml"),
              flag: str(target)}
    capsys.readouterr()
    assert main(["whatif", "--trace", inputs["--trace"], "--meta", inputs["--meta"],
                 "--out", str(out), "--quiet"]) == 2
    msg = _one_error(capsys, "whatif")
    assert f"{flag} {target}" in msg and "another --out" in msg
    assert target.read_bytes() == before
    assert not (out / "whatif.json").exists() or name == "whatif.json"


def test_whatif_sees_the_input_through_a_linked_out_folder(tmp_path, capsys, run):
    out = tmp_path / "ow"
    out.mkdir()
    shutil.copy(run / "trace.parquet", out / "whatif.json")
    before = (out / "whatif.json").read_bytes()
    (tmp_path / "link").symlink_to(out)  # the same folder spelled another way
    capsys.readouterr()
    assert main(["whatif", "--trace", str(out / "whatif.json"), "--meta",
                 str(run / "meta.yaml"), "--out", str(tmp_path / "link"), "--quiet"]) == 2
    assert str(out / "whatif.json") in _one_error(capsys, "whatif")
    assert (out / "whatif.json").read_bytes() == before


def test_detect_does_not_write_findings_over_the_whatif_it_reads(capsys, run):
    whatif = run / "whatif" / "whatif.json"
    before = whatif.read_bytes()
    capsys.readouterr()
    assert main(["detect", "--run", str(run), "--detector", "whatif",
                 "--out", str(run / "whatif"), "--quiet"]) == 2
    assert str(whatif) in _one_error(capsys, "detect")
    assert whatif.read_bytes() == before
    assert main(["detect", "--run", str(run), "--quiet"]) == 0  # RUN/detect: fine, twice
    assert main(["detect", "--run", str(run), "--quiet"]) == 0


def test_plot_does_not_draw_over_the_whatif_it_reads(tmp_path, capsys, run):
    out = tmp_path / "pics"
    out.mkdir()
    shutil.copy(run / "whatif" / "whatif.json", out / "heatmap.json")
    before = (out / "heatmap.json").read_bytes()
    capsys.readouterr()
    assert main(["plot", "--whatif", str(out / "heatmap.json"), "--out", str(out)]) == 2
    assert f"--whatif {out / 'heatmap.json'}" in _one_error(capsys, "plot")
    assert (out / "heatmap.json").read_bytes() == before


@pytest.mark.parametrize("verb,name", [("figures", "fig_confusion.json"),
                                       ("report", "report.md")])
def test_figures_and_report_do_not_write_over_their_scores_file(tmp_path, capsys, verb, name):
    out = tmp_path / "figs"
    out.mkdir()
    scores = out / name
    shutil.copy(SCORES, scores)
    before = scores.read_bytes()
    argv = ["--only", "fig_confusion"] if verb == "figures" else ["--figures", str(out)]
    capsys.readouterr()
    assert main([verb, *argv, "--scores", str(scores), "--out", str(out), "--quiet"]) == 2
    assert f"--scores {scores}" in _one_error(capsys, verb)
    assert scores.read_bytes() == before


def test_import_does_not_write_over_a_rank_trace_named_like_an_output(tmp_path, capsys):
    traces = tmp_path / "traces"
    shutil.copytree(KINETO, traces)
    (traces / "rank0.json").rename(traces / "import.json")  # a rank trace, badly named
    before = (traces / "import.json").read_bytes()
    capsys.readouterr()
    assert main(["import", "kineto", "--traces", str(traces), "--out", str(traces),
                 "--quiet"]) == 2
    assert f"--traces {traces / 'import.json'}" in _one_error(capsys, "import")
    assert (traces / "import.json").read_bytes() == before
    assert not (traces / "trace.parquet").exists()


def test_a_hard_link_to_an_input_counts_as_that_input(tmp_path):
    src = tmp_path / "faults.json"
    src.write_text("[]")
    out = tmp_path / "out"
    out.mkdir()
    os.link(src, out / "scores.json")
    with pytest.raises(InputError, match="faults.json"):
        inputs_not_overwritten([("--runs", src)], out, ["scores.json"])
    inputs_not_overwritten([("--runs", src)], out, ["other.json"])  # no collision: fine


# --- B2: synth / import never write a new trace over another job's ------------------


def test_synth_refuses_a_folder_with_another_jobs_records(tmp_path, capsys, run):
    other = tmp_path / "other"
    other.mkdir()
    for name in ("trace.parquet", "meta.yaml"):
        shutil.copy(run / name, other / name)
    (other / "result-artifact.json").write_text("{}")  # the differential tests' record
    before = (other / "trace.parquet").read_bytes()
    capsys.readouterr()
    assert main(["synth", "--out", str(other), "--quiet"]) == 2
    msg = _one_error(capsys, "synth")
    assert "result-artifact.json" in msg and "empty or new --out" in msg
    assert (other / "trace.parquet").read_bytes() == before


def test_synth_refuses_a_trace_it_did_not_write(tmp_path, capsys):
    imported = tmp_path / "imported"
    assert main(["import", "kineto", "--traces", str(KINETO), "--out", str(imported),
                 "--quiet"]) == 0
    job = tmp_path / "job"  # another job's trace and meta, nothing else
    job.mkdir()
    for name in ("trace.parquet", "meta.yaml"):
        shutil.copy(imported / name, job / name)
    before = (job / "trace.parquet").read_bytes(), (job / "meta.yaml").read_bytes()
    capsys.readouterr()
    assert main(["synth", "--out", str(job), "--quiet"]) == 2
    msg = _one_error(capsys, "synth")
    assert str(job) in msg and "did not write" in msg and "empty or new --out" in msg
    assert ((job / "trace.parquet").read_bytes(), (job / "meta.yaml").read_bytes()) == before


def test_import_refuses_a_synth_trace(tmp_path, capsys):
    job = synth(tmp_path / "job", "--steps", "3")
    (job / "faults.json").unlink()  # only the trace and meta: still another job's
    before = (job / "trace.parquet").read_bytes(), (job / "meta.yaml").read_bytes()
    capsys.readouterr()
    assert main(["import", "kineto", "--traces", str(KINETO), "--out", str(job),
                 "--quiet"]) == 2
    msg = _one_error(capsys, "import")
    assert str(job) in msg and "did not write" in msg
    assert ((job / "trace.parquet").read_bytes(), (job / "meta.yaml").read_bytes()) == before


def test_synth_may_rewrite_its_own_folder(tmp_path, capsys):
    job = synth(tmp_path / "job", "--steps", "3")
    synth(job, "--steps", "4")  # the same verb, its own earlier output: replaced
    assert json.loads((job / "faults.json").read_text()) == []


# --- C5: a run folder listed twice is one error -------------------------------------


@pytest.fixture
def clean_run(tmp_path) -> Path:
    """A clean synth run folder every --runs verb takes: what-if, findings and run.json."""
    folder = synth(tmp_path / "run", "--steps", "6")
    assert main(["whatif", "--run", str(folder), "--quiet"]) == 0
    assert main(["detect", "--run", str(folder), "--quiet"]) == 0
    (folder / "run.json").write_text(json.dumps({
        "schema": "stragglerlab.run/1", "outcome": "ok", "name": "clean", "seed": 0,
        "scenario": {}, "trace": {"complete_steps": list(range(6))}}))
    return folder


@pytest.mark.parametrize("verb", ["score", "figures", "report", "noise-floor"])
def test_a_run_folder_listed_twice_is_one_error(tmp_path, capsys, monkeypatch, clean_run,
                                               verb):
    run = clean_run
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alias").symlink_to(run)
    runs = ["run", "./run/", str(run), "alias"]
    figures = tmp_path / "figs"
    if verb == "report":  # a report needs figure results to report
        assert main(["figures", "--runs", "run", "--only", "fig03_waste_cdf", "--out",
                     str(figures), "--quiet"]) == 0
    extra = {"score": ["--detector", "whatif", "--offline-only"],
             "figures": ["--only", "fig03_waste_cdf"],
             "report": ["--figures", str(figures)], "noise-floor": []}[verb]
    assert main([verb, "--runs", "run", *extra, "--out", str(tmp_path / "one"),
                 "--quiet"]) == 0  # listed once: fine
    capsys.readouterr()
    assert main([verb, "--runs", *runs, *extra, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    msg = _one_error(capsys, verb)
    assert f"run folder {run.resolve()} is given twice (as 'run' and './run/')" in msg
    assert "list each once" in msg
    assert not (tmp_path / "o").exists()


# --- C6: synth slows one worker once per step ---------------------------------------


def test_synth_refuses_one_worker_slowed_twice_in_the_same_steps(tmp_path, capsys):
    out = tmp_path / "s"
    capsys.readouterr()
    assert main(["synth", "--out", str(out), "--slow", "1,1,2.0", "--slow", "1,1,3.0,2",
                 "--quiet"]) == 2
    msg = _one_error(capsys, "synth")
    assert "--slow 1,1,2 and --slow 1,1,3,2" in msg and "(DP 1, PP 1)" in msg
    assert not out.exists()
    with pytest.raises(ValueError, match="same steps"):
        synthesize_trace(SyntheticConfig(slow_workers=(SlowWorker(0, 0, 2.0),
                                                       SlowWorker(0, 0, 3.0, 4, 5))))


def test_synth_slows_one_worker_in_separate_step_ranges(tmp_path):
    out = synth(tmp_path / "s", "--steps", "8", "--slow", "1,1,2.0,0,3", "--slow", "1,1,3.0,4")
    faults = json.loads((out / "faults.json").read_text())
    measured = [f["measured"]["factor"] for f in faults]
    assert [f["requested"]["factor"] for f in faults] == [2.0, 3.0]
    assert measured[0] == pytest.approx(2.0, rel=0.1) and measured[1] == pytest.approx(3.0, rel=0.1)


def test_synth_refuses_a_negative_seed(tmp_path, capsys):
    from stragglerlab.cli import main

    assert main(["synth", "--out", str(tmp_path / "s"), "--seed", "-1", "--quiet"]) == 2
    assert "--seed must be an integer from 0" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_report_of_a_folder_with_no_figure_results_is_one_error(tmp_path, capsys):
    empty = tmp_path / "figs"
    empty.mkdir()
    (empty / "notes.json").write_text("{}")  # JSON, but no figure result
    assert main(["report", "--figures", str(empty), "--out", str(tmp_path / "r"),
                 "--quiet"]) == 2
    assert "no figure results here" in _one_error(capsys, "report")
    assert not (tmp_path / "r" / "report.md").exists()


def test_figures_names_a_reference_folder_without_reference_traces(tmp_path, capsys):
    empty = tmp_path / "ref"
    empty.mkdir()
    assert main(["figures", "--reference", str(empty), "--out", str(tmp_path / "f"),
                 "--quiet"]) == 2
    assert "--reference: no reference trace here" in _one_error(capsys, "figures")
