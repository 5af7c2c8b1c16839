"""`stragglerlab detect` on a synthetic run with one slow worker: the whatif detector
(which reads the run's whatif.json, written in setup) and the baselines, each as the
CLI runs it (offline, after the imports)."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

DETECTORS = ["whatif", "rank-score", "op-minmax", "last-arrival", "step-changepoint",
             "bocd", "minder", "nvrx"]


def _cli(*argv: str) -> None:
    from stragglerlab.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    if code:
        raise RuntimeError(f"stragglerlab {' '.join(argv)} exited {code}")


class Detect:
    params = DETECTORS
    param_names = ["detector"]
    timeout = 300
    number = 1
    repeat = (1, 5, 30.0)

    def setup_cache(self):
        # DP 16 x PP 4, 8 microbatches, 32 steps, worker (DP 3, stage 2) 1.5x slow.
        run = Path("synthetic-dp16").resolve()
        _cli("synth", "--out", str(run), "--dp", "16", "--pp", "4", "--microbatches", "8",
             "--steps", "32", "--slow", "3,2,1.5", "--quiet")
        _cli("whatif", "--run", str(run), "--quiet")  # the whatif detector reads its result
        return str(run)

    def time_detect(self, run, detector):
        with tempfile.TemporaryDirectory() as out:
            _cli("detect", "--run", run, "--detector", detector, "--out", out, "--quiet")
