"""Bad inputs found by a fuzz round (classes of mistakes, not one case each): trace parts
that break the trace's checks, and a baseline's score over ops that took no time."""

from __future__ import annotations

import pytest

from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.monitor.history import read_lines
from stragglerlab.run.run_folder import RunFolder
from tests.unit.monitor_helpers import make_monitor, synth


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A finished 6-step DP 2 x PP 2 synth run (trace.parquet, meta.yaml)."""
    return synth(tmp_path_factory.mktemp("s53") / "src", "--steps", "6")


def test_trace_parts_get_the_trace_checks_a_window_at_a_time(tmp_path, src):
    """One rank's compute untimed in its parts: as trace.parquet it is refused; as parts the
    monitor named a healthy worker and raised alerts. Now each window is one clear error."""
    df = RunFolder(path=src).trace().copy()
    compute = df["optype"].astype(str).str.endswith("-compute")
    df.loc[compute & (df["rank"] == 3), "duration"] = 0.0
    feeder = PartsFeeder(tmp_path, df)
    for step in feeder.steps:
        feeder.write_step(step)
    assert make_monitor(tmp_path, window_steps=2).run(once=True) == 0
    lines = read_lines(tmp_path / "monitor" / "windows.jsonl")
    assert lines and all(w["kind"] == "error" for w in lines)
    assert "every compute duration of worker(s) (dp_rank 1, stage 1) is 0" in lines[0]["message"]
    assert "Error:" not in lines[0]["message"]  # the message, not an exception's class name


def test_a_closed_stderr_keeps_the_exit_status(tmp_path):
    """`stragglerlab score ... 2>&1 >/dev/null | true` exited 0 on bad input: its progress
    line hit the closed pipe first and was taken for a reader that left stdout."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "slow-worker", run)
    (run / "faults.json").write_text("{}")
    read, write = os.pipe()
    os.close(read)  # nobody reads stderr
    try:
        proc = subprocess.run([sys.executable, "-m", "stragglerlab", "score", "--runs", str(run),
                               "--detector", "whatif", "--offline-only", "--out",
                               str(tmp_path / "score")], stdout=subprocess.DEVNULL,
                              stderr=write, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 2


@pytest.mark.parametrize("vocabulary", [False, True])
def test_a_step_numbered_twice_on_a_rank_is_one_clear_error(tmp_path, vocabulary):
    """A renamed or merged file (#552 renamed #551) silently kept one of the two steps."""
    from stragglerlab.importers.kineto import import_kineto
    from stragglerlab.util.errors import InputError
    from tests.unit import general_fixtures, kineto_fixtures

    if vocabulary:
        docs = {r: kineto_fixtures.rank_doc(r) for r in range(4)}
    else:
        docs = {r: general_fixtures.ddp_doc(r, world=2) for r in range(2)}
    for e in docs[0]["traceEvents"]:
        if e.get("name") == ("ProfilerStep#4" if vocabulary else "ProfilerStep#6"):
            e["name"] = "ProfilerStep#3" if vocabulary else "ProfilerStep#5"
    general_fixtures.write_docs(tmp_path, docs)
    with pytest.raises(InputError, match=r"ProfilerStep#[35] appears twice on this rank"):
        import_kineto(sorted(tmp_path.glob("rank*.json")))


def test_plot_whatif_on_a_general_import_says_which_verb_draws_it(tmp_path):
    import json

    from stragglerlab.run.general_record import GENERAL_WHATIF_SCHEMA
    from stragglerlab.run.whatif_record import WhatIfRecord
    from stragglerlab.util.errors import InputError

    path = tmp_path / "gen" / "whatif.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"schema": GENERAL_WHATIF_SCHEMA, "S": 1.2}))
    with pytest.raises(InputError, match=r"unannotated import .* `stragglerlab plot --run "):
        WhatIfRecord.read(path)


def test_a_yaml_number_read_as_text_says_why_wherever_it_is_checked():
    from stragglerlab.util.errors import InputError
    from stragglerlab.util.filecheck import Checker

    with pytest.raises(InputError, match=r"got '1e308' \(YAML 1.1 reads it as text"):
        Checker("noise-floor.yaml", "fix it").number("1e308", "statistics.x")
    with pytest.raises(InputError, match=r"got 'fast'; fix it") as err:
        Checker("noise-floor.yaml", "fix it").number("fast", "statistics.x")
    assert "YAML 1.1" not in str(err.value)


@pytest.mark.parametrize(("name", "says"), [
    ("123", "YAML read 123 as a number: quote it"), ('""', "scenario name ''"),
    ('"../../etc"', "scenario name '../../etc'"), ('"a\\nb"', "scenario name 'a\\nb'"),
    ('"x y"', "scenario name 'x y'")])
def test_a_scenario_name_that_cannot_name_a_folder_is_refused(tmp_path, name, says):
    from stragglerlab.scenarios.scenario import scenario_table
    from stragglerlab.util.errors import InputError

    path = tmp_path / "s.yaml"
    path.write_text(f"scenarios:\n  {name}:\n    run: {{steps: 8}}\n")
    with pytest.raises(InputError) as err:
        scenario_table(path)
    assert says in str(err.value) and "is not a name" in str(err.value)


def test_a_finished_trace_numbered_otherwise_is_monitored_by_its_workers(tmp_path, src):
    """rank = 3 - rank: whatif read it by (dp_rank, stage); the monitor, which names its
    parts by rank, failed every window with a message about missing sends."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(src, run)
    folder = RunFolder(path=run)
    df = folder.trace()
    df.assign(rank=3 - df["rank"]).to_parquet(folder.trace_path, index=False)
    analysed = make_monitor(run, window_steps=2).run(once=True)
    lines = read_lines(run / "monitor" / "windows.jsonl")
    assert analysed > 0 and [w for w in lines if w["kind"] == "error"] == []


def test_a_run_json_of_another_layout_than_its_meta_is_refused(src):
    import json

    from stragglerlab.run.run_record import RunRecord
    from stragglerlab.util.errors import InputError
    from stragglerlab.util.filecheck import Checker

    folder = RunFolder(path=src)
    doc = {"outcome": "ok", "scenario": {"parallel": {"dp": 3, "pp": 2}}}
    with pytest.raises(InputError, match=r"scenario.parallel.dp: is 3 while meta.yaml says "
                                         r"dp_size=2"):
        RunRecord.from_json(json.loads(json.dumps(doc)), Checker("run.json", "fix"), folder.meta)
    doc["scenario"]["parallel"]["dp"] = 2
    assert RunRecord.from_json(doc, Checker("run.json", "fix"), folder.meta).ok
    with pytest.raises(InputError, match="seed"):
        RunRecord.from_json({**doc, "seed": -1}, Checker("run.json", "fix"), folder.meta)
