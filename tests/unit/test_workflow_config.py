"""Workflow config validation (what the Snakefile checks at parse time) and the smoke config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from stragglerlab.util.errors import InputError
from stragglerlab.workflow.config import load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ["whatif", "rank-score", "op-minmax", "last-arrival", "step-changepoint", "bocd", "minder",
         "nvrx"]


def config(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def test_default_config_validates():
    wf = load_workflow_config(config("workflow.yaml"), KNOWN)
    assert wf.results == "results"
    assert wf.detectors == tuple(KNOWN) and wf.online is True
    assert wf.reference_traces == "tests/data/reference-traces"
    assert (ROOT / wf.reference_traces / "trace-ST.parquet").is_file()  # in every clone
    assert len(wf.runs) >= 24


def test_smoke_config_replaces_the_suite():
    """snakemake merges --configfile mappings and replaces lists: smoke selects only its runs."""
    merged = config("workflow.yaml")
    update_config(merged, config("smoke.yaml"))
    wf = load_workflow_config(merged, KNOWN)
    assert 2 <= len(wf.runs) <= 4
    kinds = {r.kind for r in wf.runs}
    assert {"clean", "slow-worker", "crash"} <= kinds
    assert all(wf.population.entries[r.scenario]["run"]["steps"] <= 10 for r in wf.runs)
    assert {r.group for r in wf.runs} >= {"fixed"} and len({r.group for r in wf.runs}) >= 2


@pytest.mark.parametrize("override, message", [
    ({"colour": "red"}, "unknown key(s) colour"),
    ({"detectors": ["whatif", "astrology"]}, "unknown detector(s) astrology; available: whatif"),
    ({"detectors": []}, "non-empty list"),
    ({"detectors": ["whatif", "whatif"]}, "twice"),
    ({"online": "yes"}, "online must be true or false"),
    ({"results": "."}, "results must name an output folder"),
    ({"reference_traces": 3}, "reference_traces must be a folder path or null"),
    ({"fixed": [{"scenario": "clean-dp2-pp2", "seeds": ["0"]}]}, "seeds must be"),
    ({"detector_settings": {"whatif": {"link_stepshare": 0.04}}}, "no setting 'link_stepshare'"),
    ({"detector_settings": {"whatif": {"min_steps": 2.5}}}, "expected a int"),
    ({"detector_settings": {"astrology": {"x": 1}}}, "not in detectors"),
    ({"detector_settings": {"whatif": 3}}, "detector_settings must map"),
])
def test_bad_config_is_one_clear_error(override, message):
    raw = config("workflow.yaml")
    update_config(raw, override)
    with pytest.raises(InputError) as e:
        load_workflow_config(raw, KNOWN, where="wf.yaml")
    assert message in str(e.value)
    assert str(e.value).startswith("wf.yaml: ")


def test_not_a_mapping():
    with pytest.raises(InputError, match="must be a mapping"):
        load_workflow_config(["x"], KNOWN)


def test_snakefile_stops_on_a_bad_config_before_any_rule(tmp_path):
    """Parse-time validation: one message, non-zero exit, nothing created."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(tmp_path), "--config", "online=maybe"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "stragglerlab workflow: config error:" in proc.stderr
    assert "online must be true or false, got 'maybe'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


def test_detector_settings_become_set_flags_of_that_detector_only():
    raw = config("workflow.yaml")
    update_config(raw, {"detector_settings": {"whatif": {"link_step_share": 0.04,
                                                          "min_steps": 4}}})
    wf = load_workflow_config(raw, KNOWN)
    assert wf.set_flags("whatif") == ["--set=link_step_share=0.04", "--set=min_steps=4"]
    assert wf.set_flags("nvrx") == []
