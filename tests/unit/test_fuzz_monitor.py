"""Fuzz: the monitor refuses to resume a history analysed
with other settings, says why nothing was analysed (naming the missing rank parts, the
warm-up that leaves out every step), and refuses --poll <= 0, a webhook without a host and a
slowdown alert that can never fire."""

from __future__ import annotations

import json
import shutil

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.history import read_lines
from stragglerlab.util.errors import InputError
from tests.unit.monitor_helpers import make_feeder, make_monitor, synth


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A finished 6-step DP 2 x PP 2 synth run (trace.parquet, meta.yaml)."""
    return synth(tmp_path_factory.mktemp("s47") / "src", "--steps", "6")


def _once(run, *flags) -> list[str]:
    return ["monitor", "--run", str(run), "--once", "--no-serve", "--quiet", *flags]


# -- 21: a history of other settings ----------------------------------------------------
@pytest.mark.parametrize(("first", "again", "flag"), [
    (["--window-steps", "1"], ["--window-steps", "4"], "--window-steps 1, not 4"),
    (["--warmup-steps", "0"], ["--warmup-steps", "2"], "--warmup-steps 0, not 2"),
    ([], ["--dp", "4"], "--dp 2, not 4"),
    ([], ["--pp", "1"], "--pp 2, not 1")])
def test_a_history_of_other_settings_is_not_resumed(tmp_path, src, capsys, first, again, flag):
    run = tmp_path / "r"
    shutil.copytree(src, run)
    assert main(_once(run, *first)) == 0
    capsys.readouterr()
    assert main(_once(run, *again)) == 2
    err = capsys.readouterr().err
    assert f"stragglerlab monitor: error: {run}: " in err and flag in err
    assert "delete the run's monitor/ folder" in err and "Traceback" not in err
    assert main(_once(run, *first)) == 0  # the recorded value resumes it


def test_window_lines_record_their_settings(tmp_path, src):
    run = tmp_path / "r"
    shutil.copytree(src, run)
    assert main(_once(run, "--window-steps", "3", "--warmup-steps", "1")) == 0
    windows = [x for x in read_lines(run / "monitor" / "windows.jsonl")
               if x["kind"] == "window"]
    assert windows and all(w["window_steps"] == 3 and w["warmup_steps"] == 1 for w in windows)


def test_an_older_history_without_settings_resumes_as_before(tmp_path, src):
    from stragglerlab.monitor.history import settings_conflict

    run = tmp_path / "r"
    shutil.copytree(src, run)
    assert main(_once(run, "--window-steps", "2")) == 0
    path = run / "monitor" / "windows.jsonl"
    old = [{k: v for k, v in x.items() if k not in ("window_steps", "warmup_steps")}
           for x in read_lines(path)]
    path.write_text("".join(json.dumps(x) + "\n" for x in old))
    assert main(_once(run, "--window-steps", "5")) == 0  # nothing recorded to compare
    assert settings_conflict(old, {"window_steps": 5, "dp_size": 2}) is None
    assert "--dp 2, not 3" in settings_conflict(old, {"dp_size": 3})


def test_a_live_monitor_restarted_with_another_window_is_refused(tmp_path, src):
    feeder = make_feeder(src, tmp_path)
    for step in feeder.steps[:3]:
        feeder.write_step(step)
    assert make_monitor(tmp_path, window_steps=2).run(once=True) == 3
    with pytest.raises(InputError, match="--window-steps 2, not 8"):
        make_monitor(tmp_path)
    again = make_monitor(tmp_path, window_steps=2)
    assert again.last_step == 2
    again.sender.close()


# -- 22: why nothing was analysed ------------------------------------------------------
def test_the_no_window_warning_names_the_warmup_and_not_none(tmp_path, src, capsys):
    feeder = make_feeder(src, tmp_path)
    feeder.status = False  # no status file: step 0 is complete only once step 1 is seen
    feeder.write_step(feeder.steps[0])
    assert main(["monitor", "--run", str(tmp_path), "--once", "--no-serve"]) == 0
    err = capsys.readouterr().err
    assert "warning: no window analysed" in err and "None" not in err
    assert "past the warm-up (0 step(s))" in err


def test_a_warmup_past_a_live_runs_steps_is_said(tmp_path, src, capsys):
    feeder = make_feeder(src, tmp_path)
    for step in feeder.steps[:2]:
        feeder.write_step(step)
    assert main(["monitor", "--run", str(tmp_path), "--once", "--no-serve",
                 "--warmup-steps", "4"]) == 0  # live: later steps may still come
    err = capsys.readouterr().err
    assert "warning: no window analysed" in err
    assert "--warmup-steps 4 leaves out every step the run completed (steps 0-1)" in err


def test_a_missing_rank_part_is_named(tmp_path, src, capsys):
    feeder = make_feeder(src, tmp_path)
    for step in feeder.steps[:3]:
        feeder.write_step(step)
    (tmp_path / "trace-parts" / "rank1.bin").unlink()
    shutil.copy(src / "meta.yaml", tmp_path / "meta.yaml")
    assert main(["monitor", "--run", str(tmp_path), "--once", "--no-serve"]) == 0
    err = capsys.readouterr().err
    assert "1 of 4 ranks (trace-parts/rank1.bin: missing or empty)" in err


def test_an_empty_trace_parts_folder_names_every_missing_rank(tmp_path, src, capsys):
    run = tmp_path / "r"
    shutil.copytree(src, run)
    (run / "trace.parquet").unlink()
    (run / "trace-parts").mkdir()
    assert main(["monitor", "--run", str(run), "--once", "--no-serve"]) == 0
    err = capsys.readouterr().err
    assert "4 of 4 ranks (trace-parts/rank0.bin, rank1.bin, rank2.bin, rank3.bin" in err


def test_a_warmup_past_the_finished_run_is_an_error(tmp_path, src, capsys):
    run = tmp_path / "r"
    shutil.copytree(src, run)
    assert main(_once(run, "--warmup-steps", "99999")) == 2
    err = capsys.readouterr().err
    assert "--warmup-steps 99999 leaves out every step the run completed (steps 0-5)" in err
    assert "pass --warmup-steps 5 or less" in err and "Traceback" not in err
    assert main(_once(run, "--warmup-steps", "5")) == 0


# -- 28: bad flag values ---------------------------------------------------------------
@pytest.mark.parametrize(("flags", "message"), [
    (["--poll", "0"], "--poll 0.0: give seconds between looks, above 0"),
    (["--poll", "-1"], "--poll -1.0: give seconds between looks, above 0"),
    (["--webhook", "http://"], "--webhook 'http://': no host"),
    (["--webhook", "https://:9000/x"], "no host"),
    (["--webhook", "http://h:99999/"], "--webhook 'http://h:99999/': Port out of range"),
    (["--slowdown-alert", "inf"], "--slowdown-alert inf: S is >= 1, so give a threshold"),
    (["--slowdown-alert", "1e308"], "at most 1000"),
    (["--slowdown-alert", "nan"], "--slowdown-alert nan")])
def test_bad_monitor_values_are_one_error_line(tmp_path, src, capsys, flags, message):
    run = tmp_path / "r"
    shutil.copytree(src, run)
    assert main(_once(run, *flags)) == 2
    err = capsys.readouterr().err
    assert err.startswith("stragglerlab monitor: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (run / "monitor").exists()  # refused before anything is written


def test_a_short_poll_is_still_accepted(tmp_path, src):
    run = tmp_path / "r"
    shutil.copytree(src, run)
    assert main(_once(run, "--poll", "0.001", "--webhook", "http://127.0.0.1:9/hook",
                      "--slowdown-alert", "1000")) == 0
