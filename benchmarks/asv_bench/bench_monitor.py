"""One live-monitor window: the what-if and the monitor's detectors on the last 8 steps
(`stragglerlab.monitor.window.analyse_window`), at 16 workers (DP 4 x PP 4) and at 1,024
(DP 256 x PP 4), each a synthetic job with one slow worker, 8 microbatches."""

from __future__ import annotations

from pathlib import Path

from .bench_detect import _cli

LAYOUTS = {16: (4, 4), 1024: (256, 4)}
"""Workers -> (DP, PP)."""
WINDOW_STEPS = 8


class MonitorWindow:
    params = list(LAYOUTS)
    param_names = ["workers"]
    timeout = 300
    number = 1
    repeat = (1, 10, 30.0)

    def setup_cache(self):
        runs = {}
        for workers, (dp, pp) in LAYOUTS.items():
            run = Path(f"window-{workers}").resolve()
            _cli("synth", "--out", str(run), "--dp", str(dp), "--pp", str(pp),
                 "--microbatches", "8", "--steps", str(WINDOW_STEPS), "--slow", "1,1,1.5",
                 "--quiet")
            runs[workers] = str(run)
        return runs

    def setup(self, runs, workers):
        from stragglerlab.monitor.window import make_detectors
        from stragglerlab.trace.trace_io import read_trace

        run = Path(runs[workers])
        self.df, self.meta = read_trace(str(run / "trace.parquet"), str(run / "meta.yaml"))
        self.detectors = make_detectors(["whatif"])
        self.where = str(run)

    def time_window(self, runs, workers):
        from stragglerlab.monitor.window import analyse_window

        analyse_window(self.df, self.meta, self.detectors, self.where, testbed=False,
                       window_steps=WINDOW_STEPS)
