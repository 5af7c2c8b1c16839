"""Classes of bad input a stranger's fuzz run found escaping as tracebacks.

Each test writes one mistake of its class and asserts the one clear error (or that the
input is read as it should be): numbers JSON cannot hold, a garbled pandas metadata key in
a parquet file, durations too small to move the clock, malformed process-group members,
a monitor history or lock in a shape the monitor never writes, and output the console
cannot take (an ASCII locale, a full disk).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stragglerlab.cli import main
from stragglerlab.importers.layout import from_pg_config
from stragglerlab.monitor.history import read_lines, resumable
from stragglerlab.trace.trace_io import read_trace, write_trace
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import load_json, load_yaml
from tests.unit.monitor_helpers import make_monitor, synth

HUGE = "9" * 5000
"""Past Python's 4,300-digit limit on str -> int."""


def test_an_integer_past_the_digit_limit_is_one_input_error(tmp_path):
    (tmp_path / "a.json").write_text('{"a": ' + HUGE + "}")
    (tmp_path / "a.yaml").write_text(f"a: {HUGE}\n")
    with pytest.raises(InputError, match="a.json: x holds a value"):
        load_json(tmp_path / "a.json", "x", "fix it")
    with pytest.raises(InputError, match="y holds a value"):
        load_yaml(tmp_path / "a.yaml", "y", "fix it")


def test_a_garbled_pandas_metadata_key_does_not_stop_the_read(tmp_path):
    run = synth(tmp_path / "run", "--steps", "3")
    df, meta = read_trace(run / "trace.parquet")
    table = pq.read_table(run / "trace.parquet")
    for garbage in (b"{garbage", b"[" * 50_000):
        table = table.replace_schema_metadata({**table.schema.metadata, b"pandas": garbage})
        pq.write_table(table, tmp_path / "t.parquet")
        again, _ = read_trace(tmp_path / "t.parquet")
        assert len(again) == len(df)


def test_durations_too_small_to_move_the_clock_are_one_error(tmp_path, capsys):
    run = synth(tmp_path / "run", "--steps", "3")
    df, meta = read_trace(run / "trace.parquet")
    df["duration"] = 5e-324  # denormal: start + duration == start
    write_trace(df, meta, run / "trace.parquet")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "do not add up to a measurable step" in err and "Traceback" not in err


def test_process_group_members_that_are_not_ints_are_skipped():
    pgs = {r: [{"pg_desc": "DATA_PARALLEL_GROUP", "ranks": [0, "x"]}] for r in (0, 1)}
    with pytest.raises(InputError, match="no process group 'DATA_PARALLEL_GROUP'"):
        from_pg_config(pgs, 2, "trace")


def test_history_lines_the_monitor_never_writes_are_passed_over(tmp_path):
    path = tmp_path / "windows.jsonl"
    good = {"schema": "stragglerlab.monitor-window/1", "kind": "window", "step": 3,
            "dp_size": 2, "pp_size": 2, "findings": []}
    lines = [good, {"kind": "window", "step": 4},  # no dp_size, no schema
             {**good, "dp_size": "2"}, {"schema": "stragglerlab.monitor-window/1",
                                        "kind": "error"}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n" + "[" * 50_000 + "\n")
    assert len(read_lines(path)) == 4  # every whole JSON object; the deep line is skipped
    assert [x for x in read_lines(path) if resumable(x)] == [good]


@pytest.mark.parametrize("shape", ["monitor-is-a-file", "lock-is-a-folder"])
def test_a_monitor_folder_in_the_wrong_shape_is_one_input_error(tmp_path, shape):
    run = synth(tmp_path / "run", "--steps", "3")
    if shape == "monitor-is-a-file":
        (run / "monitor").write_text("x")
    else:
        (run / "monitor" / "monitor.lock").mkdir(parents=True)
    with pytest.raises(InputError, match="cannot hold the monitor's lock file"):
        make_monitor(run).run(once=True)


def test_output_an_ascii_console_cannot_encode_is_escaped(tmp_path):
    run = synth(tmp_path / "run ☃", "--steps", "3")
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "stragglerlab", "whatif", "--run", str(run)],
                         capture_output=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert b"run \\u2603" in out.stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_under_stdout_is_one_error():
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "stragglerlab", "list", "detectors"],
                             stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert out.returncode == 2
    assert b"No space left on device" in out.stderr and b"Traceback" not in out.stderr


def test_a_population_group_asking_for_a_hundred_million_jobs_is_refused():
    from stragglerlab.workflow.population import MAX_GROUP_COUNT, expand_group

    spec = {"name": "g", "kind": "clean", "count": 100_000_000}
    with pytest.raises(InputError, match=f"at most {MAX_GROUP_COUNT:,} jobs"):
        expand_group(spec, 0, 16, "population.groups[0]")


def test_a_report_over_a_run_whose_versions_are_a_list_still_says_its_provenance(tmp_path):
    from stragglerlab.figures.report import provenance

    run = synth(tmp_path / "run", "--steps", "3")
    (run / "run.json").write_text(json.dumps({"outcome": "ok", "versions": [1, 2]}))
    prov = provenance([run])
    assert prov.versions == {} and prov.outcomes == {"ok": 1}
