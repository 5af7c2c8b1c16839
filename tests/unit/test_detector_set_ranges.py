"""Detector settings out of the range their math needs (found by a fuzz round).

`detect --set` took any finite number >= 0 for every threshold, so bocd divided by zero
(hazard_lambda=0, noise_sd=0), overflowed (noise_sd=1e300) or went NaN silently
(prior_sd=0); a ratio threshold of 0 named every worker a slow device; a score threshold
or significance level over 1 named every rank; a warm-up of 0 left a baseline unset, so
step-changepoint and bocd silently saw nothing. Each class below -- zero, tiny (1e-300),
huge (1e300) -- of each field it breaks is one error naming the field; every other value
of the class runs clean (no warning, no NaN).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

from stragglerlab.analysis.detectors.bocd import BocdConfig
from stragglerlab.analysis.detectors.config_ranges import SettingRangeError
from stragglerlab.analysis.detectors.registry import DETECTORS, detector_names
from stragglerlab.cli import main
from tests.unit.monitor_helpers import synth

CLASSES = {"zero": "0", "tiny": "1e-300", "huge": "1e300"}

WHATIF_RATIOS = ("straggling_slowdown", "seq_min_slowdown", "step_threshold",
                 "worker_threshold", "stage_ratio", "compute_ratio", "link_over_median",
                 "device_compute_ratio", "shift_ratio", "late_arrival_ratio",
                 "stage_compute_ratio")

REFUSED = {
    # bocd: 1/lambda is a change probability; the spreads' squares and reciprocals.
    ("bocd", "hazard_lambda"): ("zero", "tiny"),
    ("bocd", "noise_sd"): ("zero", "tiny", "huge"),
    ("bocd", "prior_sd"): ("zero", "tiny", "huge"),
    ("bocd", "warmup_steps"): ("zero",),
    ("step-changepoint", "warmup_steps"): ("zero",),
    # Ratios over a reference: under 1 the reference passes.
    **{("whatif", f): ("zero", "tiny") for f in WHATIF_RATIOS},
    ("op-minmax", "ratio_threshold"): ("zero", "tiny"),
    ("op-minmax", "comm_ratio_threshold"): ("zero", "tiny"),
    # Divisors.
    ("op-minmax", "gc_min_fraction"): ("zero", "tiny"),
    ("last-arrival", "min_wait_fraction"): ("zero", "tiny"),
    # A probability, and scores at most 1.
    ("last-arrival", "alpha"): ("huge",),
    ("rank-score", "threshold"): ("huge",),
    ("rank-score", "stage_threshold"): ("huge",),
    ("nvrx", "relative_threshold"): ("huge",),
    ("nvrx", "individual_threshold"): ("huge",),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """DP 2 x PP 2, a 2x slow worker from step 5 of 10, with its what-if (for `whatif`)."""
    run = synth(tmp_path_factory.mktemp("set") / "run", "--steps", "10", "--slow", "1,1,2.0,5")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    return run


INT_CLASSES = {"zero": "0", "tiny": "1", "huge": "1000000"}
"""The classes for a count: the least one and the registry's largest."""


def _value(detector: str, field: str, cls: str) -> str:
    return (INT_CLASSES if isinstance(_default(detector, field), int) else CLASSES)[cls]


def _default(detector: str, field: str):
    return getattr(DETECTORS.load(detector)().config, field)


def _detect(run: Path, out: Path, detector: str, setting: str, online: bool) -> int:
    return main(["detect", "--run", str(run), "--detector", detector, "--set", setting,
                 "--out", str(out), "--quiet"] + (["--online"] if online else []))


CASES = [(d, f, c) for (d, f), classes in REFUSED.items() for c in classes]


@pytest.mark.parametrize("online", [False, True], ids=["offline", "online"])
@pytest.mark.parametrize("detector,field,cls", CASES, ids=[f"{d}-{f}-{c}" for d, f, c in CASES])
def test_a_setting_out_of_its_range_is_one_error(run, tmp_path, capsys, detector, field, cls,
                                                 online):
    value = _value(detector, field, cls)
    capsys.readouterr()
    assert _detect(run, tmp_path / "d", detector, f"{field}={value}", online) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"stragglerlab detect: error: {detector} setting {field}=")
    assert "expected a number" in lines[0] and "default" in lines[0]
    assert not (tmp_path / "d").exists()


def test_every_other_class_of_every_numeric_field_runs_clean(run, tmp_path, capsys):
    """Whatever REFUSED does not list is a value the detector takes: it runs with no
    warning and writes finite numbers (a huge threshold is an off switch)."""
    for detector in detector_names():
        config = DETECTORS.load(detector)().config
        for f in dataclasses.fields(config):
            current = getattr(config, f.name)
            if isinstance(current, bool) or not isinstance(current, (int, float)):
                continue
            for cls in CLASSES:
                if cls in REFUSED.get((detector, f.name), ()):
                    continue
                value = _value(detector, f.name, cls)
                out = tmp_path / f"{detector}-{f.name}-{cls}"
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # a RuntimeWarning is a NaN on its way
                    rc = _detect(run, out, detector, f"{f.name}={value}", online=False)
                err = capsys.readouterr().err
                if rc == 2:  # the registry's own rule (a count over 1e6, a warm-up of -1)
                    assert f.name in err and "Traceback" not in err
                    continue
                assert rc == 0, (detector, f.name, value, err)
                text = (out / f"{detector}.json").read_text()
                assert not any(c in text for c in ("NaN", "Infinity")), (detector, f.name, text)
                json.loads(text)


def test_the_bounds_themselves_are_taken(run, tmp_path, capsys):
    """Each range's edge is a value the math handles: no error, no warning."""
    edges = [("bocd", "hazard_lambda=1.000001"), ("bocd", "noise_sd=1e-9"),
             ("bocd", "noise_sd=1e9"), ("bocd", "prior_sd=1e-9"), ("bocd", "prior_sd=1e9"),
             ("bocd", "warmup_steps=1"), ("whatif", "device_compute_ratio=1"),
             ("op-minmax", "ratio_threshold=1"), ("last-arrival", "alpha=0"),
             ("last-arrival", "min_wait_fraction=1e-9"), ("rank-score", "threshold=1"),
             ("nvrx", "relative_threshold=1"), ("step-changepoint", "warmup_steps=1")]
    for i, (detector, setting) in enumerate(edges):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _detect(run, tmp_path / str(i), detector, setting, online=True) == 0, \
                capsys.readouterr().err


def test_a_config_built_in_code_checks_its_range_too():
    with pytest.raises(SettingRangeError, match=r"noise_sd=0: expected a number in \[1e-09"):
        BocdConfig(noise_sd=0)
    assert BocdConfig(hazard_lambda=2.0).hazard_lambda == 2.0


def test_a_list_setting_is_comma_separated_op_names(run, tmp_path, capsys):
    # `--set ops=forward-compute` was a tuple of its characters, which matched no op.
    from stragglerlab.analysis.detectors.rank_score import RankScoreConfig
    from stragglerlab.analysis.detectors.registry import configured

    cfg = configured("rank-score", RankScoreConfig(), {"ops": "forward-compute"})
    assert cfg.ops == ("forward-compute",)
    assert configured("rank-score", RankScoreConfig(),
                      {"ops": "forward-compute, backward-compute"}).ops == (
        "forward-compute", "backward-compute")
    assert _detect(run, tmp_path / "a", "rank-score", "ops=forward-compute,bogus", False) == 2
    assert "ops must name op types" in capsys.readouterr().err
    assert _detect(run, tmp_path / "b", "rank-score", "ops=,", False) == 2
