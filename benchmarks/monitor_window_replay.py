"""Replay finished clean runs in the monitor's sliding windows under a noise floor; count
the runs with a finding (each one is a false alert the live monitor would have raised).

    .venv/bin/python benchmarks/monitor_window_replay.py --window-steps 6 RUN_DIR...
    .venv/bin/python benchmarks/monitor_window_replay.py --noise-floor F.yaml RUN_DIR...

Every window is the one `stragglerlab monitor` analyses after each step (from the
detector's `min_steps` steps on, the last K), diagnosed by the `whatif` detector against
the floor (`default`: the shipped one). The runs must be clean and must not be among
those the floor was measured on, or the count says nothing.
"""

from __future__ import annotations

import argparse

import numpy as np

from stragglerlab.analysis.detectors.base import Run, load_run
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.detectors.whatif_evidence import Evidence
from stragglerlab.noise_floor import noise_floor_option


def findings(run: Run, det: WhatIfDetector, window: int) -> list[tuple[int, str]]:
    """(last step of the window, cause) of every finding over the run's windows."""
    steps = np.sort(run.trace["step"].unique())
    out = []
    for i in range(det.config.min_steps - 1, len(steps)):
        s = steps[max(0, i - window + 1):i + 1]
        w = Run(run.trace[run.trace["step"].isin(s)], run.meta, run.path, testbed=run.testbed)
        out += [(int(s[-1]), f.root_cause.value)
                for f in det.diagnose(w, Evidence.analyse(w), window_steps=window)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--window-steps", type=int, default=8)
    ap.add_argument("--noise-floor", default="default", help="a file, default or none")
    args = ap.parse_args()
    det = WhatIfDetector()
    if args.noise_floor != "default":
        det.noise_floor, det.shipped_floor = noise_floor_option(args.noise_floor), False
    flagged = 0
    for d in args.runs:
        got = findings(load_run(d), det, args.window_steps)
        flagged += bool(got)
        print(f"{d}: {got[:4] or 'no finding'}")
    print(f"runs with a finding: {flagged} of {len(args.runs)}")


if __name__ == "__main__":
    main()
