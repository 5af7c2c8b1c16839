"""`stragglerlab score` over a small generated suite: 6 synthetic runs (DP 8 x PP 4, 16
steps; 4 with one slow worker each, 2 clean), each with the whatif, rank-score and
op-minmax detectors' outputs written in setup, scored offline against faults.json."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .bench_detect import _cli

DETECTORS = ["whatif", "rank-score", "op-minmax"]
SLOW = ["1,1,1.5", "3,2,2.0", "5,0,1.3", "7,3,1.8", None, None]
"""Per run: its --slow (DP,STAGE,FACTOR), None for a clean run."""


class Score:
    timeout = 600
    number = 1
    repeat = (1, 10, 30.0)

    def setup_cache(self):
        runs = []
        for i, slow in enumerate(SLOW):
            run = Path(f"suite/run{i}").resolve()
            _cli("synth", "--out", str(run), "--dp", "8", "--pp", "4", "--microbatches", "8",
                 "--steps", "16", "--seed", str(i), *(["--slow", slow] if slow else []),
                 "--quiet")
            _cli("whatif", "--run", str(run), "--quiet")
            for det in DETECTORS:
                _cli("detect", "--run", str(run), "--detector", det, "--quiet")
            runs.append(str(run))
        return runs

    def time_score(self, runs):
        with tempfile.TemporaryDirectory() as out:
            _cli("score", "--runs", *runs, "--detector", *DETECTORS, "--offline-only",
                 "--out", out, "--quiet")
