"""A third-party detector package, installed with pip, is discovered and scored."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from stragglerlab.workloads.synthetic import SlowWorker
from tests.unit.test_detect_cli import make_run

PLUGIN_SOURCE = '''
"""A toy detector: blames rank 0 of every run."""
from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause


class BlameRankZero(Detector):
    description = "toy plug-in: always blames rank 0"

    def detect(self, run):
        steps = run.steps
        return [Finding([run.rank_ref(0)], int(steps[0]), int(steps[-1]),
                        RootCause.SLOW_WORKER, 0.5)]
'''


def _wheel(where: Path) -> Path:
    """Build toydet-0.1 as a wheel (by hand: no build backend or network needed)."""
    files = {
        "toydet/__init__.py": PLUGIN_SOURCE,
        "toydet-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: toydet\nVersion: 0.1\n",
        "toydet-0.1.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\n"
                                       "Root-Is-Purelib: true\nTag: py3-none-any\n"),
        "toydet-0.1.dist-info/entry_points.txt": (
            "[stragglerlab.detectors]\nblame-zero = toydet:BlameRankZero\n"),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append("toydet-0.1.dist-info/RECORD,,")
    path = where / "toydet-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("toydet-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_installed_plugin_is_listed_run_and_scored(tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--target", str(site), str(_wheel(tmp_path))], check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), str(Path(__file__).resolve().parents[2])])}
    cli = [sys.executable, "-m", "stragglerlab"]

    listing = subprocess.run(cli + ["list", "detectors"], env=env, check=True,
                             capture_output=True, text=True).stdout
    assert "blame-zero" in listing and "toy plug-in" in listing

    slow = make_run(tmp_path / "slow", slow_workers=(SlowWorker(1, 1, 1.8),))
    clean = make_run(tmp_path / "clean")
    out = tmp_path / "scores.json"
    for run in (slow, clean):  # the workflow's steps: what-if, then each detector, then score
        subprocess.run(cli + ["whatif", "--run", str(run), "--quiet"], env=env, check=True,
                       capture_output=True)
        for name in ("blame-zero", "whatif"):
            subprocess.run(cli + ["detect", "--run", str(run), "--detector", name, "--out",
                                  str(run / "detect"), "--quiet"],
                           env=env, check=True, capture_output=True)
    subprocess.run(cli + ["score", "--runs", str(slow), str(clean), "--detector", "blame-zero",
                          "whatif", "--offline-only", "--out", str(tmp_path), "--quiet"],
                   env=env, check=True, capture_output=True)
    scores = json.loads(out.read_text())
    assert "blame-zero" in scores and "whatif" in scores
    # Rank 0 is wrong on both runs: 2 false positives, the victim (rank 3) missed.
    assert (scores["blame-zero"]["tp"], scores["blame-zero"]["fp"],
            scores["blame-zero"]["fn"]) == (0, 2, 1)
    assert scores["whatif"]["f1"] == 1.0
