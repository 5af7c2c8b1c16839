"""`stragglerlab synth`: simulating a DP x PP job and writing its run folder, at a small
layout and at a 4,096-worker one (DP 256 x PP 16, 16 microbatches, 8 steps: 3.3 M ops)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .bench_detect import _cli

LAYOUTS = {"dp16-pp4": ("16", "4", "8"), "dp256-pp16": ("256", "16", "16")}
"""Name -> (--dp, --pp, --microbatches); 8 steps each."""


class Synth:
    params = list(LAYOUTS)
    param_names = ["layout"]
    timeout = 600
    number = 1
    repeat = (1, 5, 60.0)

    def _synth(self, layout):
        dp, pp, mb = LAYOUTS[layout]
        with tempfile.TemporaryDirectory() as tmp:
            _cli("synth", "--out", str(Path(tmp) / "run"), "--dp", dp, "--pp", pp,
                 "--microbatches", mb, "--steps", "8", "--slow", "1,1,1.5", "--quiet")

    def time_synth(self, layout):
        self._synth(layout)

    def peakmem_synth(self, layout):
        self._synth(layout)
