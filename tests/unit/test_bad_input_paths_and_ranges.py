"""Classes of bad input a stranger's fuzz run found escaping.

Each test writes one mistake of its class and asserts one clear error, not a traceback,
a hang or an absurd result: event labels that are containers, step numbers past an
int64, detector settings out of any sane range, a poll interval that overflows a wait,
`--out` through a link that leads nowhere, a named pipe no one writes to, traces whose
steps overlap or have no length, a new trace written into another run's folder, and
synthetic factors past any trace's range.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.config import MonitorConfig
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import read_text
from tests.unit.cli_errors import one_error as _one_error
from tests.unit.monitor_helpers import synth

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto" / "dp2-pp2"


def _kineto_copy(tmp_path: Path, change) -> Path:
    """The dp2-pp2 Kineto traces, rank 0's complete events passed through change(events)."""
    out = tmp_path / "traces"
    out.mkdir()
    for f in sorted(KINETO.iterdir()):
        raw = f.read_bytes()
        doc = json.loads(gzip.decompress(raw) if f.suffix == ".gz" else raw)
        if f.name.startswith("rank0"):
            change([e for e in doc["traceEvents"] if e.get("ph") == "X"])
        (out / f.name.removesuffix(".gz")).write_text(json.dumps(doc))
    return out


def _import(traces: Path, out: Path) -> int:
    return main(["import", "kineto", "--traces", str(traces), "--out", str(out), "--quiet"])


@pytest.mark.parametrize("key,value", [("cat", [1]), ("tid", [1]), ("tid", {"a": 1})])
def test_an_event_label_that_is_a_container_is_one_error(tmp_path, capsys, key, value):
    def change(events):
        for e in events:
            e[key] = value
    assert _import(_kineto_copy(tmp_path, change), tmp_path / "out") == 2
    assert f"{key} is {type(value).__name__}" in _one_error(capsys, "import")
    assert not (tmp_path / "out").exists()


def test_a_step_number_past_an_int64_is_not_a_step(tmp_path, capsys):
    def change(events):
        step = next(e for e in events if str(e.get("name")).startswith("ProfilerStep#"))
        step["name"] = "ProfilerStep#" + "9" * 5000
    rc = _import(_kineto_copy(tmp_path, change), tmp_path / "out")
    err = capsys.readouterr().err
    assert "Traceback" not in err and "digits" not in err
    assert rc in (0, 2)  # the other steps may still import; never a traceback


@pytest.mark.parametrize("change,match", [
    (lambda events: [e.update(dur=0) for e in events], "no op range lies inside"),
    (lambda events: [e.update(dur=e["dur"] * 50) for e in events
                     if str(e.get("name")).startswith("ProfilerStep#")], "starts .* before"),
])
def test_steps_with_no_length_or_overlapping_are_one_error(tmp_path, capsys, change, match):
    assert _import(_kineto_copy(tmp_path, change), tmp_path / "out") == 2
    import re
    assert re.search(match, _one_error(capsys, "import"))


@pytest.mark.parametrize("detector,setting", [
    ("whatif", "min_steps=0"), ("whatif", "min_steps=-1"), ("whatif", "online_window_steps=-1"),
    ("nvrx", "window_steps=0"), ("rank-score", "window_steps=99999999999999999999999"),
    ("minder", "continuity=0"), ("whatif", "link_share=-0.1"),
])
def test_a_detector_setting_out_of_range_is_one_error(tmp_path, capsys, detector, setting):
    run = synth(tmp_path / "run", "--steps", "3")
    capsys.readouterr()
    assert main(["detect", "--run", str(run), "--detector", detector, "--set", setting,
                 "--quiet"]) == 2
    assert "expected a" in _one_error(capsys, "detect")
    assert not (run / "detect").exists()


def test_a_warmup_of_zero_steps_is_refused_where_it_sets_the_baseline(tmp_path, capsys):
    # The registry lets a warm-up be 0; step-changepoint's baseline is the warm-up's
    # median, so with none it never had one and silently saw nothing (config_ranges.py).
    run = synth(tmp_path / "run", "--steps", "6")
    capsys.readouterr()
    assert main(["detect", "--run", str(run), "--detector", "step-changepoint", "--set",
                 "warmup_steps=0", "--quiet"]) == 2
    assert "warmup_steps=0: expected a number >= 1" in _one_error(capsys, "detect")


@pytest.mark.parametrize("poll", [float("inf"), 1e300, float("nan"), 0.0])
def test_a_poll_interval_no_wait_can_take_is_refused(tmp_path, poll):
    with pytest.raises(InputError, match="--poll"):
        MonitorConfig(run=tmp_path, poll_s=poll).check()


@pytest.mark.parametrize("verb", ["whatif", "detect", "synth"])
@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_an_out_link_that_leads_nowhere_is_one_error(tmp_path, capsys, verb, link):
    run = synth(tmp_path / "run", "--steps", "3")
    capsys.readouterr()
    out = tmp_path / "out"
    if link == "dangling":
        out.symlink_to(tmp_path / "missing" / "dir")
    else:
        out.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(out)
    args = {"whatif": ["--run", str(run)], "detect": ["--run", str(run)], "synth": []}[verb]
    assert main([verb, *args, "--out", str(out), "--quiet"]) == 2
    assert "symbolic link" in _one_error(capsys, verb)


def test_a_named_pipe_no_one_writes_to_does_not_block_the_read(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)

    def stuck(*_):
        raise TimeoutError("read_text blocked on a named pipe")
    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)
    try:
        assert read_text(fifo, "config", "fix it", 1000) == ""
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_trace_that_is_not_a_regular_file_is_named_so(tmp_path, capsys):
    run = synth(tmp_path / "run", "--steps", "3")
    fifo = tmp_path / "trace.parquet"
    os.mkfifo(fifo)
    capsys.readouterr()
    assert main(["whatif", "--trace", str(fifo), "--meta", str(run / "meta.yaml"),
                 "--out", str(tmp_path / "w"), "--quiet"]) == 2
    assert "not a regular file" in _one_error(capsys, "whatif")


def test_a_new_trace_is_not_written_into_another_runs_folder(tmp_path, capsys):
    run = synth(tmp_path / "run", "--steps", "3")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    capsys.readouterr()
    assert _import(KINETO, run) == 2
    assert "another run's" in _one_error(capsys, "import")
    assert main(["synth", "--out", str(run), "--quiet"]) == 2
    assert "another run's" in _one_error(capsys, "synth")
    again = tmp_path / "imported"  # importing twice into its own folder is fine
    assert _import(KINETO, again) == 0 and _import(KINETO, again) == 0


@pytest.mark.parametrize("flag", [["--jitter", "1e300"], ["--last-stage-factor", "1e300"],
                                  ["--last-stage-factor", "0"], ["--slow", "1,1,1e300"]])
def test_a_synthetic_factor_past_any_trace_is_refused(tmp_path, capsys, flag):
    assert main(["synth", "--out", str(tmp_path / "s"), "--quiet", *flag]) == 2
    assert "must be a number" in _one_error(capsys, "synth")


@pytest.mark.parametrize("slow", ["0,0,2.0,5,2", "0,0,2.0,9", "0,0,2.0,0,8"])
def test_a_slow_window_outside_the_steps_says_so(tmp_path, capsys, slow):
    assert main(["synth", "--out", str(tmp_path / "s"), "--quiet", "--slow", slow]) == 2
    assert "steps run 0..7; give 0 <= FIRST <= LAST <= 7" in _one_error(capsys, "synth")


def test_an_empty_traces_flag_is_one_error(tmp_path, capsys):
    assert main(["import", "kineto", "--traces", "", "--out", str(tmp_path / "o")]) == 2
    assert "--traces is empty" in _one_error(capsys, "import")
