"""Fuzz (faults and scenarios): each bad input is one clear InputError.

A2 two faults of one kind on one worker in overlapping steps; A4 faults.json magnitudes
of impossible sign and duplicate records; A6 model.vocab 1; M2 faults.json messages point
at the user docs; M4 a misspelt fault param is named; M7 a FIFO faults.json.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from stragglerlab.cli import main
from stragglerlab.injectors.registry import build_injectors, check_scenario_faults
from stragglerlab.scenarios.faults import parse_faults, read_faults
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.util.errors import InputError
from tests.unit.cli_errors import one_error
from tests.unit.monitor_helpers import synth

DP, PP, STEPS = 2, 2, 10


def _fault(kind="slow-worker", targets=((0, 0),), first=0, last=None, **params) -> dict:
    out = {"kind": kind, "first_step": first, "last_step": last,
           "params": params or {"factor": 2.0}}
    if targets is not None:
        out["targets"] = [{"dp_rank": d, "stage": s} for d, s in targets]
    return out


def _parse_error(*faults: dict) -> str:
    with pytest.raises(InputError) as info:
        parse_faults(list(faults), DP, PP, STEPS, "my.yaml")
    assert info.value.path == "my.yaml"
    return str(info.value)


def _config(tmp_path: Path, **scenario) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"scenarios": {"x": scenario}}))
    return str(path)


# --- A2: two faults of one kind on one worker, overlapping steps -------------------------


def test_two_slow_workers_on_one_worker_in_the_same_steps_are_refused():
    msg = _parse_error(_fault(factor=2), _fault(factor=3))
    assert "faults[0] and faults[1]" in msg and "slow-worker" in msg
    assert "DP 0, stage 0" in msg and f"steps 0-{STEPS - 1}" in msg
    assert "merge them into one fault" in msg and "do not overlap" in msg


def test_the_overlap_named_is_the_shared_steps_only():
    msg = _parse_error(_fault(first=2, last=5), _fault(), _fault(targets=((1, 1),), first=5))
    assert "faults[0] and faults[1]" in msg and "steps 2-5" in msg
    msg = _parse_error(_fault(targets=((1, 1),), first=0, last=4),
                       _fault(targets=((0, 1), (1, 1)), first=4))
    assert "DP 1, stage 1" in msg and "step 4" in msg


def test_a_job_wide_fault_counts_as_every_worker():
    msg = _parse_error(_fault("gc-pauses", targets=None, pause_ms=50),
                       _fault("gc-pauses", targets=((1, 0),), pause_ms=80))
    assert "faults[0] and faults[1]" in msg and "DP 1, stage 0" in msg
    msg = _parse_error(_fault("gc-pauses", targets=None, pause_ms=50, first=3),
                       _fault("gc-pauses", targets=None, pause_ms=80, last=3))
    assert "every worker" in msg and "step 3" in msg


def test_same_kind_apart_and_different_kinds_together_stay_allowed():
    specs = parse_faults([_fault(last=4), _fault(first=5), _fault(targets=((1, 0),)),
                          _fault("net-delay", delay_ms=5.0)], DP, PP, STEPS, "my.yaml")
    assert len(specs) == 4


def test_the_fuzz_repro_is_refused_by_scenario_loading(tmp_path):
    cfg = _config(tmp_path, faults=[_fault(factor=2), _fault(factor=3)])
    with pytest.raises(InputError, match=r"faults\[0\] and faults\[1\] are both slow-worker"):
        load_scenario("x", cfg)


# --- A4: faults.json magnitudes and duplicates --------------------------------------------


def _record(**over) -> dict:
    rec = {"kind": "slow-worker", "targets": [{"rank": 3, "dp_rank": 1, "stage": 1}],
           "first_step": 0, "last_step": None, "requested": {"factor": 2.0},
           "measured": {"factor": 2.0131}}
    rec.update(over)
    return rec


def _read_error(tmp_path: Path, records: list) -> str:
    path = tmp_path / "faults.json"
    path.write_text(json.dumps(records))
    with pytest.raises(InputError) as info:
        read_faults(path)
    assert info.value.path == str(path)
    return str(info.value)


@pytest.mark.parametrize("key, section, magnitude, needs", [
    ("factor", "measured", -2.0, "> 0"),
    ("factor", "requested", 0, "> 0"),
    ("rate_mbit", "measured", 0.0, "> 0"),
    ("pause_ms", "requested", -5, "> 0"),
    ("delay_ms", "requested", -1.0, ">= 0"),
    ("victim_latency_ms", "measured", -0.5, ">= 0"),
])
def test_a_magnitude_of_impossible_sign_is_refused(tmp_path, key, section, magnitude, needs):
    msg = _read_error(tmp_path, [_record(), _record(**{section: {key: magnitude}}, first_step=1)])
    assert f"faults[1].{section}.{key}: {magnitude} must be {needs}" in msg


def test_zero_where_meaningful_and_a_measured_difference_below_zero_are_kept(tmp_path):
    path = tmp_path / "faults.json"
    path.write_text(json.dumps([
        _record(kind="gc-pauses", targets=[], requested={"pause_ms": 50.0},
                measured={"pause_ms": None, "pauses": 0}),
        _record(kind="net-delay", requested={"delay_ms": 0.0},
                measured={"delay_ms": -0.02, "arrival_ms": -0.1})]))
    gc, delay = read_faults(path)
    assert gc.measured["pauses"] == 0 and not gc.took_effect
    assert delay.measured["delay_ms"] == -0.02


def test_the_same_record_twice_is_refused(tmp_path):
    msg = _read_error(tmp_path, [_record(), _record(kind="net-delay",
                                                    requested={"delay_ms": 5.0}), _record()])
    assert "faults[2]" in msg and "the same record as faults[0]" in msg


def test_score_names_the_bad_faults_json(tmp_path, capsys):
    run = synth(tmp_path / "run", "--steps", "4")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert main(["detect", "--run", str(run), "--detector", "whatif", "--quiet"]) == 0
    capsys.readouterr()
    for records, expect in (([_record(measured={"factor": -2.0})],
                             "faults[0].measured.factor: -2.0 must be > 0"),
                            ([_record(), _record()], "faults[1]: the same record as faults[0]")):
        (run / "faults.json").write_text(json.dumps(records))
        assert main(["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                     "--out", str(tmp_path / "out"), "--quiet"]) == 2
        line = one_error(capsys, "score")
        assert expect in line and "faults.json" in line


# --- M2: messages point at the user docs ---------------------------------------------------


def test_faults_json_messages_point_at_the_user_docs(tmp_path):
    msg = _read_error(tmp_path, [_record(kind="nope")])
    assert "docs/faults.md#ground-truth" in msg and "design.md" not in msg


# --- A6: one token is nothing to predict ---------------------------------------------------


def test_a_vocabulary_of_one_token_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"model.vocab=1 must be >= 2: with one token there "
                                         r"is nothing to predict"):
        load_scenario("x", _config(tmp_path, model={"vocab": 1}))
    assert load_scenario("x", _config(tmp_path, model={"vocab": 2})).model.vocab == 2


# --- M4: a misspelt param is named ---------------------------------------------------------


def test_a_misspelt_param_is_named_with_the_known_ones(tmp_path):
    cfg = _config(tmp_path, faults=[_fault(factr=2)])
    scenario = load_scenario("x", cfg)
    with pytest.raises(InputError) as info:
        check_scenario_faults(scenario, cfg)
    msg = str(info.value)
    assert "faults[0] (slow-worker): unknown key(s) in params: factr; known: factor" in msg
    assert "is required" not in msg


@pytest.mark.parametrize("fault, known", [
    (_fault("gc-pauses", targets=None, pause_ms=-1, every_step=2), "every_steps, pause_ms"),
    (_fault("net-throttle", rate_mbt=10), "burst_kb, rate_mbit"),
    (_fault("hang", when=3), "none"),
])
def test_an_unknown_param_wins_over_a_bad_or_missing_known_one(fault, known):
    specs = parse_faults([fault], DP, PP, STEPS, "my.yaml")
    with pytest.raises(InputError, match=f"unknown key\\(s\\) in params: .*; known: {known}"):
        build_injectors(specs, "my.yaml")


def test_the_cli_names_the_misspelt_param(tmp_path, capsys):
    cfg = _config(tmp_path, faults=[_fault(factr=2)])
    assert main(["list", "scenarios", "--config", cfg]) == 2
    assert "unknown key(s) in params: factr; known: factor" in one_error(capsys, "list")


# --- M7: a FIFO faults.json ----------------------------------------------------------------


def test_a_fifo_faults_json_is_not_a_regular_file_and_never_blocks(tmp_path):
    fifo = tmp_path / "faults.json"
    os.mkfifo(fifo)

    def stuck(*_):
        raise TimeoutError("read_faults blocked on a named pipe")
    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)
    try:
        with pytest.raises(InputError, match=r"is not a regular file \(a pipe or a device\?\)"):
            read_faults(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_an_empty_fifo_json_is_named_a_pipe_not_bad_json(tmp_path):
    from stragglerlab.util.filecheck import load_json

    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as info:
        load_json(fifo, "run record (run.json)", "rerun")
    assert "not a regular file" in str(info.value) and "not valid JSON" not in str(info.value)
