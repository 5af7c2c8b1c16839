"""Clean runs are clean to the detector (slow tier): a fresh short run of three layout
families, trained, analysed and detected as the workflow does, gets no finding over the
shipped noise floor (config/noise-floor.yaml) and stays within its family's clean S.

    .venv/bin/python -m pytest -m slow tests/e2e/test_clean_repeats.py
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stragglerlab.method.noise_floor import DEFAULT_NOISE_FLOOR, read_noise_floor
from stragglerlab.trace.meta import LayoutFamily

pytestmark = pytest.mark.slow


def cli(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "stragglerlab", *args, "--quiet"],
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("scenario, family", [
    ("clean-dp4-pp1", LayoutFamily.PURE_DP),
    ("clean-dp1-pp4", LayoutFamily.PURE_PP),
    ("clean-dp2-pp2", LayoutFamily.DP_PP),
])
def test_a_fresh_clean_run_gets_no_finding_over_the_floor(tmp_path, scenario, family):
    run = tmp_path / scenario
    # A seed the shipped floor was not measured on (it used seeds 131-133).
    cli("train", "--scenario", scenario, "--seed", "101", "--steps", "12", "--out", str(run))
    cli("whatif", "--run", str(run))
    cli("detect", "--run", str(run), "--detector", "whatif", "--out", str(run / "detect"))
    doc = json.loads((run / "detect" / "whatif.json").read_text())
    assert doc["findings"] == [], doc["findings"]
    floor = doc["noise_floor"]
    assert floor["measured"] and floor["family"] == family.value
    shipped = read_noise_floor(DEFAULT_NOISE_FLOOR).family(family)
    assert floor["n_runs"] == shipped.n_runs
    # the run's S sits in its family's clean range, give or take the host's drift
    assert doc["noise_floor"]["job_slowdown"] < shipped.job_slowdown.max + 0.05
