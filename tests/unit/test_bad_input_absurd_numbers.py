"""Absurd numbers a stranger's fuzz round found, each now refused or said plainly:
a "slow" worker that is not slower, a synthetic trace its own whatif refuses, M_W of a
job with no waste, a fault past its run's steps, a targeted fault with no target."""

from __future__ import annotations

import json

import pytest

from stragglerlab.analysis.ground_truth import load_truths
from stragglerlab.cli import main
from stragglerlab.scenarios.faults import TARGETED_KINDS, FaultKind, read_faults
from stragglerlab.util.errors import InputError
from tests.unit.cli_errors import one_error
from tests.unit.monitor_helpers import synth


@pytest.mark.parametrize("factor", ["1", "0.5", "1e-308"])
def test_synth_refuses_a_slow_worker_that_is_not_slower(tmp_path, capsys, factor):
    assert main(["synth", "--out", str(tmp_path / "s"), "--slow", f"1,1,{factor}",
                 "--quiet"]) == 2
    assert "--slow factor must be a number above 1" in one_error(capsys, "synth")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("pp,most", [(1, 49992), (2, 24996), (3, 16664)])
def test_synth_writes_only_what_its_own_whatif_reads(tmp_path, capsys, pp, most):
    assert main(["synth", "--out", str(tmp_path / "s"), "--dp", "1", "--pp", str(pp),
                 "--steps", "1", "--microbatches", str(most + 1), "--quiet"]) == 2
    assert f"--microbatches is at most {most:,} with --pp {pp}" in one_error(capsys, "synth")


def test_m_w_is_not_printed_for_a_job_with_no_waste(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["synth", "--out", str(run), "--dp", "1", "--pp", "8", "--microbatches", "1",
                 "--steps", "2", "--jitter", "0", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["whatif", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "not straggling" in out and "M_W, M_S            n/a" in out
    doc = json.loads((run / "whatif" / "whatif.json").read_text())
    assert "m_w" in json.dumps(doc).lower()  # the values are kept in whatif.json


def _faults(run, records):
    (run / "faults.json").write_text(json.dumps(records))


def test_a_fault_past_a_completed_runs_steps_is_refused(tmp_path):
    run = synth(tmp_path / "r", "--steps", "8")
    _faults(run, [{"kind": "slow-worker", "targets": [{"rank": 1, "dp_rank": 1, "stage": 0}],
                   "first_step": 100, "last_step": 200, "requested": {}, "measured": {}}])
    with pytest.raises(InputError, match="starts at step 100, after the run's last traced"):
        load_truths([run])
    _faults(run, [{"kind": "hang", "targets": [{"rank": 1, "dp_rank": 1, "stage": 0}],
                   "first_step": 8, "last_step": None, "requested": {}, "measured": {}}])
    (truth,) = load_truths([run])  # the step after the last: where a failure is named
    assert truth.kind == "hang"


def test_a_targeted_fault_record_with_no_target_is_refused(tmp_path):
    path = tmp_path / "faults.json"
    path.write_text(json.dumps([{"kind": "slow-worker", "targets": [], "first_step": 2}]))
    with pytest.raises(InputError, match="a slow-worker fault acts on named workers"):
        read_faults(path)
    path.write_text(json.dumps([{"kind": "gc-pauses", "targets": [], "first_step": 2}]))
    assert read_faults(path)[0].targets == []  # job-wide


def test_targeted_kinds_are_the_injectors_that_need_targets():
    from stragglerlab.injectors.registry import injector_class

    assert TARGETED_KINDS == {k.value for k in FaultKind if injector_class(k).needs_targets}


def test_a_float32_epoch_clock_is_named_not_blamed_on_the_ops(tmp_path, tiny_df, tiny_meta):
    import numpy as np

    from stragglerlab.trace.validate import validate_trace

    df = tiny_df.copy()
    df["start_ts"] = (df["start_ts"] + 1.7e9).astype(np.float32)
    with pytest.raises(InputError, match="float32 resolves only 128 s"):
        validate_trace(df, tiny_meta, "t")
    df["start_ts"] = tiny_df["start_ts"].astype(np.float32)  # relative: fine
    validate_trace(df, tiny_meta, "t")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "null\n"])
def test_an_empty_meta_yaml_says_empty(tmp_path, text):
    from stragglerlab.trace.meta import JobMeta

    path = tmp_path / "meta.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match="job meta is empty: no YAML document"):
        JobMeta.load(path)


def test_bad_defaults_are_named_as_defaults(tmp_path):
    from stragglerlab.scenarios.scenario import list_scenarios, load_scenario

    cfg = tmp_path / "s.yaml"
    cfg.write_text("defaults:\n  run: {steps: -1}\nscenarios:\n  mine:\n    parallel: {dp: 2}\n")
    for load in (lambda: list_scenarios(cfg), lambda: load_scenario("mine", cfg)):
        with pytest.raises(InputError, match=r"\('defaults'\)"):
            load()


def test_warmup_message_says_how_many_steps_train_needs():
    from stragglerlab.scenarios.scenario import load_scenario

    with pytest.raises(InputError, match=r"warmup_steps=3 must be in \[0, run.steps=2\).*at "
                                         "least 4"):
        load_scenario("clean-dp2-pp1", overrides={"run": {"steps": 2}})


def test_whatif_names_an_empty_trace_or_meta_flag(tmp_path, capsys):
    assert main(["whatif", "--trace", "", "--out", str(tmp_path / "o")]) == 2
    assert "--trace is empty" in one_error(capsys, "whatif")
    run = synth(tmp_path / "r")
    assert main(["whatif", "--trace", str(run / "trace.parquet"), "--meta", "", "--out",
                 str(tmp_path / "o")]) == 2
    assert "--meta is empty" in one_error(capsys, "whatif")
