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

from stragglerlab.analysis.detectors.base import Run, load_run
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.detectors.whatif_evidence import Evidence


def findings(run: Run, det: WhatIfDetector, window: int) -> list[tuple[int, str]]:
    """(last step of the window, cause) of every finding over the run's windows."""
    return [(int(w.trace["step"].max()), f.root_cause.value)
            for w in det._windows(run, window)  # the windows an online replay diagnoses
            for f in det.diagnose(w, Evidence.analyse(w), window_steps=window)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--window-steps", type=int, default=8)
    ap.add_argument("--noise-floor", default="default", help="a file, default or none")
    args = ap.parse_args()
    det = WhatIfDetector()
    det.use_noise_floor(args.noise_floor)
    flagged = 0
    for d in args.runs:
        got = findings(load_run(d), det, args.window_steps)
        flagged += bool(got)
        print(f"{d}: {got[:4] or 'no finding'}")
    print(f"runs with a finding: {flagged} of {len(args.runs)}")


if __name__ == "__main__":
    main()
