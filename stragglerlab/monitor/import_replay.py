"""The monitor on an unannotated import: its steps replayed as windows, as a live run's are.

An unannotated import (`stragglerlab import kineto` with the general op model:
ops.parquet, import.json, whatif.json, no trace.parquet) is a finished trace
whose ops carry no op vocabulary. `ImportMonitor` reads its op table once and,
for every step past the warm-up, analyses the window of the last K steps
(--window-steps) as the live monitor does, appending the same windows.jsonl
line (schema WINDOW_SCHEMA) that the page, /metrics and the alerts read:

* the window's what-if is the general what-if (analysis/whatif_general.py) of
  the window's ops: S, the discrepancy and its reproduction gate, S per rank
  (the heatmap's workers: DP x stage where the import knew the layout, else
  every rank its own DP worker, stragglerlab.trace.step_view.layout_of), and the
  attribution by kind (`compute` and each communication kind; `host` and
  `device` on GPU traces) in the line's `optype_slowdown`;
* the `whatif` detector names what that window's what-if names
  (analysis/general_findings.py), once the window holds its `min_steps`;
* a detector that needs only steps, ranks, span kinds and times
  (TraceNeed.STEP_TIMES) sees the window's compute and communication spans
  (stragglerlab.trace.step_view) as a run of its own, as it sees a live window;
* a detector that compares ops by their names (TraceNeed.OP_VOCABULARY) cannot
  run here: it is named once in the log, and the others go on; a monitor left
  with no detector is refused.

A line says where its numbers came from: `op_model` "general". The import has
no trace clock shared with this host, so `lag_from_step_end_s` is null.

    monitor = monitor_for(MonitorConfig(run=Path("out/imported")), log=print)
    monitor.run(once=True)     # an ImportMonitor for an import, else a Monitor
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from stragglerlab.monitor.config import WINDOW_SCHEMA, MonitorConfig
from stragglerlab.monitor.runner import Monitor
from stragglerlab.monitor.state import MonitorState
from stragglerlab.monitor.window import finding_json
from stragglerlab.run.general_record import is_general_import
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.errors import InputError

OP_MODEL = "general"
"""`op_model` of an import's window line (the general op model's what-if)."""


def monitor_for(cfg: MonitorConfig, log: Callable[[str], None] | None = None,
                state: MonitorState | None = None) -> Monitor:
    """The monitor of `cfg.run`: an ImportMonitor for an unannotated import, else a Monitor
    (trace parts, or a finished trace.parquet)."""
    if is_general_import(cfg.run):
        return ImportMonitor(cfg, log=log, state=state)
    return Monitor(cfg, log=log, state=state)


def vocabulary_message(names: list[str], usable: list[str]) -> str:
    """Why detectors that compare ops by name do not run on an import, and which do."""
    verb = "compares" if len(names) == 1 else "compare"
    return (f"{', '.join(names)} {verb} ops by their names in the Megatron op vocabulary "
            "(forward-compute, grads-reduce-scatter, ...) across ranks, which an unannotated "
            f"import does not have; on an import the monitor runs {', '.join(usable)} (the "
            "what-if and the detectors that need only step times), or annotate the job "
            "(docs/own-job.md) and import it again")


class ImportMonitor(Monitor):
    """A Monitor whose run is an unannotated import: every step's window is replayed from
    its op table in one look (module doc); the rest (history, resume, alerts, the page's
    state, the lock) is the Monitor's."""

    def __init__(self, cfg: MonitorConfig, log: Callable[[str], None] | None = None,
                 state: MonitorState | None = None) -> None:
        from stragglerlab.trace.step_view import layout_of

        for flag, value in (("--dp", cfg.dp), ("--pp", cfg.pp)):
            if value is not None:
                raise InputError(f"{flag}: an unannotated import's layout is the one it was "
                                 "imported with (its op table's DP rank and stage, else "
                                 "every rank its own DP worker); drop it, or import again "
                                 "with `stragglerlab import kineto ... --layout dp=N,pp=M`",
                                 str(cfg.run))
        runnable = [n for n in dict.fromkeys(cfg.detectors) if runs_on_import(n)]
        self.skipped = [n for n in dict.fromkeys(cfg.detectors) if n not in runnable]
        """The detectors asked for that cannot run on an import (named once in the log)."""
        if not runnable:
            raise InputError("no detector of --detectors runs on an unannotated import: "
                             + vocabulary_message(self.skipped, import_detectors()),
                             str(cfg.run))
        # Read before anything is written: a damaged import is one clear error, no monitor/.
        self.ops, self.report = _read(cfg.run)
        """The import's op table (checked) and import.json's report (the gate's evidence)."""
        self.import_steps = sorted(int(s) for s in self.ops["step"].unique())
        """The import's step numbers, ascending."""
        super().__init__(cfg, log=log, state=state)
        self.detectors = {n: d for n, d in self.detectors.items() if n in runnable}
        if self.skipped:
            self.log("not run on this unannotated import: "
                     + vocabulary_message(self.skipped, runnable))
        if cfg.noise_floor != "default" and "whatif" in runnable:
            self.log("--noise-floor is not used on an unannotated import: the whatif "
                     "detector names what each window's what-if names "
                     "(analysis/general_findings.py)")
        self.meta = layout_of(self.ops)
        self.state.set_layout(self.meta.dp_size, self.meta.pp_size)
        self.replayed = False
        """Every window past the resume point was analysed (the one look an import needs)."""

    @property
    def ended(self) -> bool:
        """An import is a finished trace: one look analyses it all."""
        return True

    def poll(self) -> list[dict]:
        """Analyse every step's window after the last analysed one, in the first look; the
        new windows ([] on later looks)."""
        if self.replayed:
            return []
        self.replayed = True
        self.found_at = time.time()
        from stragglerlab.analysis.detectors import TraceNeed
        from stragglerlab.trace.step_view import step_view

        steps = [s for s in self.import_steps if s >= self._warmup()]
        spans = step_view(self.ops) if any(d.needs is TraceNeed.STEP_TIMES
                                           for d in self.detectors.values()) else None
        out = []
        for i, step in enumerate(steps):
            if step <= self.last_step:
                continue
            window = steps[max(0, i + 1 - self.cfg.window_steps):i + 1]
            line = self._window(spans, window)
            if line is not None:
                self._publish(line)
                out.append(line)
            self.last_step = step
        return out

    def _window(self, spans: pd.DataFrame | None, steps: list[int]) -> dict | None:
        """The window line of `steps`, or None with the error recorded."""
        try:
            return import_window(self.ops[self.ops["step"].isin(steps)], spans, self.meta,
                                 self.detectors, str(self.cfg.run), self.report)
        except Exception as e:  # noqa: BLE001 - one window's failure is recorded, not fatal
            why = str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}"
            self.error(f"window of steps {steps[0]}-{steps[-1]} could not be analysed: {why}",
                       steps[-1])
            return None

    def _publish(self, line: dict) -> None:
        """Record a window and raise its alerts (as Monitor._analyse does a live one's)."""
        now = time.time()
        line["lag_s"] = round(now - self.found_at, 4)
        line["lag_from_step_end_s"] = None  # the import's clock is not this host's
        line["time"] = round(now, 3)
        line["window_steps"], line["warmup_steps"] = self.cfg.window_steps, self._warmup()
        self._record(line)
        for alert in self.tracker.observe(line):
            self.log(f"alert: {alert['event']} at step {line['step']}"
                     + (f" ({alert['finding']['cause']})" if alert["finding"] else ""))
            self.sender.send(alert)

    def idle_reason(self) -> tuple[str, bool]:
        """Why no window was analysed: the warm-up leaves out every step of the import (the
        user's flag, when given), or the history has them all already."""
        if not self.import_steps:
            return "the import's op table holds no step", False
        first, last = self.import_steps[0], self.import_steps[-1]
        warmup = self._warmup()
        if last < warmup:
            given = self.cfg.warmup_steps is not None
            return (f"--warmup-steps {warmup} leaves out every step of the import (steps "
                    f"{first}-{last}); pass --warmup-steps {last} or less"), given
        return f"every step of the import (steps {first}-{last}) is in the history already", \
            False


def _read(run) -> tuple[pd.DataFrame, dict]:
    """An import's op table (checked: stragglerlab.trace.ops_table) and import.json's report (the
    gate's evidence; {} without one)."""
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.util.filecheck import load_json

    ops = RunFolder(path=run).ops()
    again = f"import the traces again with `stragglerlab import kineto --traces ... --out {run}`"
    path = run / "import.json"
    report = {}
    if path.is_file():
        doc = load_json(path, "import.json", again)
        report = doc if isinstance(doc, dict) else {}
    return ops, report


def import_window(ops: pd.DataFrame, spans: pd.DataFrame | None, meta: JobMeta,
                  detectors: dict, where: str, report: dict | None = None) -> dict:
    """The window line (without lag fields) of an import window's op table `ops` (module doc);
    `spans`: the whole import's step view (stragglerlab.trace.step_view), sliced to the window for
    the step-time detectors."""
    from stragglerlab.analysis.detectors import Run
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector
    from stragglerlab.analysis.general_findings import general_findings
    from stragglerlab.analysis.whatif_general import whatif_general
    from stragglerlab.monitor.window import _r

    t0 = time.perf_counter()
    wi = whatif_general(ops, report=report or {})
    summary = wi.summary()
    steps = sorted(int(s) for s in wi.per_step)
    findings = []
    for name, det in detectors.items():
        if isinstance(det, WhatIfDetector):
            if len(steps) < det.config.min_steps:
                continue
            found = general_findings(summary)
        else:
            view = spans[spans["step"].isin(steps)].reset_index(drop=True)
            found = det.detect(Run(view, meta, where, vocabulary=False))
        findings += [finding_json(name, f) for f in found]
    coords = {r: (int(c[0]), int(c[1])) for r, c in wi.worker_coords.items()}
    cell = (lambda r: coords[r]) if coords else (lambda r: (int(r), 0))
    grid = np.full((meta.pp_size, meta.dp_size), np.nan)
    for r, v in wi.worker_score.items():
        d, p = cell(r)
        if 0 <= d < meta.dp_size and 0 <= p < meta.pp_size:
            grid[p, d] = v
    by_stage = wi.by_stage if wi.by_stage is not None else {0: wi.S}
    by_dp = wi.by_dp if wi.by_dp is not None else wi.by_rank
    attribution = dict(wi.by_kind) | dict(wi.by_segment_part)
    return {
        "schema": WINDOW_SCHEMA, "kind": "window", "step": steps[-1], "steps": steps,
        "dp_size": meta.dp_size, "pp_size": meta.pp_size,
        "op_model": OP_MODEL,
        "slowdown": _r(wi.S),
        "simulation_discrepancy": _r(wi.discrepancy),
        "valid": wi.validity.valid,
        "validity": wi.validity.banner(),
        "t_ideal_s": _r(wi.T_ideal, 7),
        "step_time_s": _r(wi.actual_step_s, 7),
        "worker_slowdown": [[_r(v, 4) for v in row] for row in grid.tolist()],
        "stage_slowdown": {str(k): _r(v) for k, v in sorted(by_stage.items())},
        "dp_slowdown": {str(k): _r(v) for k, v in sorted(by_dp.items())},
        "optype_slowdown": {k: _r(v) for k, v in attribution.items()},
        "top_workers": [{"dp_rank": cell(r)[0], "stage": cell(r)[1]} for r in wi.top_workers],
        "findings": findings,
        "analysis_s": round(time.perf_counter() - t0, 4),
    }


def runs_on_import(name: str) -> bool:
    """Whether the detector `name` runs on an import's windows: the `whatif` detector (the
    window's general what-if) and those that need only step times (InputError for a name no
    detector has)."""
    from stragglerlab.analysis.detectors import TraceNeed, get_detector
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector

    det = get_detector(name)
    return isinstance(det, WhatIfDetector) or det.needs is TraceNeed.STEP_TIMES


def import_detectors() -> list[str]:
    """The registered detectors that run on an import's windows."""
    from stragglerlab.analysis.detectors import detector_names

    return [n for n in detector_names() if runs_on_import(n)]
