"""The one convention of every verb (stragglerlab/cli/__init__.py): `--out` defaults to
RUN/<verb> with --run, the result goes to stdout and progress to stderr, --quiet
silences progress only, a rerun removes the stale outputs it owns, every JSON has a
`schema`, and long work shows progress (cli/progress.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.cli.progress import Reporter, duration


@pytest.fixture
def run(tmp_path) -> Path:
    """A small synthetic run folder (dp 2 x pp 2, one slow worker)."""
    out = tmp_path / "run"
    assert main(["synth", "--quiet", "--out", str(out), "--dp", "2", "--pp", "2", "--steps",
                 "6", "--microbatches", "2", "--slow", "1,1,2.0"]) == 0
    return out


def test_quiet_silences_progress_never_the_result(run, capsys):
    capsys.readouterr()
    assert main(["whatif", "--run", str(run)]) == 0
    loud = capsys.readouterr()
    assert "slowdown S" in loud.out and "graph:" in loud.err  # result stdout, progress stderr
    assert "graph:" not in loud.out
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert "slowdown S" in quiet.out and quiet.err == ""
    for flags in ([], ["--quiet"]):
        assert main(["detect", "--run", str(run), *flags]) == 0
        got = capsys.readouterr()
        assert "finding(s)" in got.out and got.err == "", flags
        assert "slow-worker" in got.out


def test_out_defaults_to_the_run_folders_verb_folder(run, capsys):
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert main(["detect", "--run", str(run), "--online", "--quiet"]) == 0
    assert (run / "whatif" / "whatif.json").is_file()
    doc = json.loads((run / "detect" / "whatif-online.json").read_text())
    assert doc["schema"].startswith("stragglerlab.findings/")
    assert main(["detect", "--run", str(run), "--out", "", "--quiet"]) == 2  # empty: refused
    assert "--out is empty" in capsys.readouterr().err


def test_whatif_rerun_removes_the_outputs_it_no_longer_writes(run, capsys):
    out = run / "whatif"
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    plain = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert main(["whatif", "--run", str(run), "--timelines", "--quiet"]) == 0
    timelines = {p.relative_to(out) for p in out.rglob("*") if p.is_file()} - plain
    assert timelines, "--timelines wrote nothing more"
    (out / "notes.txt").write_text("mine")  # a user's file: never touched
    (out / "artifact-format" / "mine.json").write_text("{}")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    for name in timelines:
        assert not (out / name).exists(), f"stale {name} left beside the new whatif.json"
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "artifact-format" / "mine.json").is_file()
    assert {p.relative_to(out) for p in out.rglob("*") if p.is_file()} == \
        plain | {Path("notes.txt"), Path("artifact-format/mine.json")}
    assert json.loads((out / "whatif.json").read_text())["schema"].startswith(
        "stragglerlab.whatif/")


def test_figures_remove_stale_files_of_the_figures_built_only(tmp_path, capsys):
    from tests.unit.test_figures_population import make_run

    d = make_run(tmp_path / "runs", "a", "slow", slowdown=1.5)
    out = tmp_path / "fig"
    out.mkdir()
    for name in ("fig03_waste_cdf-old-job.png", "table_s6.png", "mine.png"):
        (out / name).write_bytes(b"x")
    assert main(["figures", "--runs", str(d), "--only", "fig03_waste_cdf", "--out", str(out),
                 "--quiet"]) == 0
    got = capsys.readouterr()
    assert got.out.startswith("[1/1] fig03_waste_cdf: ") and got.err == ""
    names = {p.name for p in out.iterdir()}
    assert "fig03_waste_cdf-old-job.png" not in names  # the figure's own, not written again
    assert {"table_s6.png", "mine.png", "fig03_waste_cdf.png", "fig03_waste_cdf.json"} <= names
    doc = json.loads((out / "fig03_waste_cdf.json").read_text())
    assert doc["schema"] == "stragglerlab.figure/1"


def test_score_header_shows_the_latency_unit():
    from stragglerlab.cli.score import LEADERBOARD, table

    row = {"f1": 1.0, "n_runs": 1, "by_kind": {}, "sensitivity": [],
           "false_findings_per_1k_clean_worker_steps": 0.0, "clean_runs_with_findings": 0,
           "clean_runs": 0, "unobservable_faults": 0}
    header = table({"whatif": row}).splitlines()[1]
    for metric in LEADERBOARD:
        assert f" {metric}" in header, metric  # whole: `_steps` is the unit


def test_scores_schema_and_older_files_without_it(tmp_path):
    from stragglerlab.figures.scores import SCORES_SCHEMA, parse_scores
    from stragglerlab.util.errors import InputError

    old = {"whatif": {"f1": 0.5, "n_runs": 2}}
    assert [d.name for d in parse_scores(old, "old.json").detectors] == ["whatif"]
    new = parse_scores({"schema": SCORES_SCHEMA, **old}, "new.json")
    assert [d.name for d in new.detectors] == ["whatif"]
    with pytest.raises(InputError, match="schema"):
        parse_scores({"schema": "other/1", **old}, "bad.json")


def test_train_progress_on_stderr_outcome_on_stdout(tmp_path, monkeypatch, capsys):
    from tests.unit.test_train_allow_failed import fake_launcher

    fake = fake_launcher("ok", True, [1, 2, 3])
    inner = fake.launch

    def launch(scenario, out, progress, ray_address=None, keep_monitor=False):
        progress("ray started in 0.1s; launching 4 ranks")
        for step in range(1, 4):
            progress(f"step {step}/3  loss 2.000  step time 10 ms")
        return inner(scenario, out, progress, ray_address)

    fake.launch = launch
    monkeypatch.setitem(sys.modules, "stragglerlab.workloads.launcher", fake)
    assert main(["train", "--scenario", "crash", "--out", str(tmp_path / "r")]) == 0
    got = capsys.readouterr()
    assert got.out.startswith("run ok: 3 traced steps")
    assert "ray started" in got.err and "step 3/3  loss 2.000" in got.err
    assert "run ok" not in got.err


def test_plain_progress_is_occasional_with_eta_and_quiet_is_silent():
    stream = io.StringIO()
    with Reporter(stream=stream, every_s=3600) as progress:
        progress("starting")
        task = progress.task("runs", total=4)
        for i in range(4):
            task.advance(note=f"run {i}")
        progress.error("a failure")
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("] starting")
    assert "runs 1/4  run 0  (ETA " in lines[1]
    assert "runs 4/4  run 3  (done in " in lines[2]
    assert lines[3] == "a failure" and len(lines) == 4  # steps 2 and 3: within every_s
    quiet = io.StringIO()
    with Reporter(quiet=True, stream=quiet) as progress:
        progress("x")
        t = progress.task("runs", total=2)
        t.advance()
        t("step 1/2 y")
        progress.error("shown")
    assert quiet.getvalue() == "shown\n"


def test_counted_callback_messages_move_the_count():
    stream = io.StringIO()
    with Reporter(stream=stream, every_s=0) as progress:
        steps = progress.task("step", total=10)
        steps("rank 1 failed (hang); stopping the run")  # not a count: a line
        steps("step 5/8  loss 1.0")
    assert (steps.completed, steps.total) == (5, 8)
    text = stream.getvalue()
    assert "] rank 1 failed (hang)" in text and "step 5/8  loss 1.0  (ETA" in text


def test_live_display_on_a_terminal(monkeypatch):
    stream = io.StringIO()
    with Reporter(stream=stream, live=True) as progress:
        assert progress.display is not None
        task = progress.task("figures", total=2)
        progress("a line above the bar")
        task.advance(note="fig03")
        task.advance(note="fig04")
    assert "a line above the bar" in stream.getvalue()
    assert Reporter(stream=io.StringIO()).live is False  # not a terminal: plain lines


@pytest.mark.parametrize("seconds, text", [(4.4, "4s"), (65, "1m05s"), (7260, "2h01m")])
def test_duration(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize("argv,flag", [
    (["synth", "--out", "{tmp}/a", "--steps", "4", "--out", "{tmp}/b"], "--out"),
    (["score", "--runs", "{tmp}/a", "--runs", "{tmp}/b", "--out", "{tmp}"], "--runs"),
    (["import", "kineto", "--traces", "x", "--traces", "y", "--out", "{tmp}/k"], "--traces"),
])
def test_a_flag_given_twice_is_refused_not_last_wins(tmp_path, capsys, argv, flag):
    with pytest.raises(SystemExit) as e:
        main([a.format(tmp=tmp_path) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {flag} is given twice" in err and "Traceback" not in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_repeatable_flags_still_repeat(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["synth", "--out", str(out), "--steps", "6", "--slow", "0,0,1.5",
                 "--slow", "1,1,2.0", "--quiet"]) == 0


def test_monitor_args_override_the_jobs_layout_flags_and_may_not_name_run(tmp_path):
    from stragglerlab.cli.monitor import monitor_argv
    from stragglerlab.scenarios.scenario import load_scenario
    from stragglerlab.util.errors import InputError

    scenario = load_scenario("clean-dp2-pp2")
    run = tmp_path / "run"
    argv = monitor_argv(run, scenario, "--warmup-steps=5 --port 0")
    assert argv[:3] == ["monitor", "--run", str(run)]
    assert argv.count("--dp") == 1 and "--warmup-steps" not in argv
    assert argv[-2:] == ["--port", "0"] and "--warmup-steps=5" in argv
    with pytest.raises(InputError, match="leave --run out"):
        monitor_argv(run, scenario, f"--run {tmp_path}")
    for flag in ("--runs", "--watch"):  # several jobs: a monitor of its own, not train's
        with pytest.raises(InputError, match="leave --run out"):
            monitor_argv(run, scenario, f"{flag} {tmp_path}")
