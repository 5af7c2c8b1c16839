"""Prometheus text exposition (format 0.0.4) of the monitor's latest window, no client library.

    text = metrics_text(latest_window, steps_analysed=12, errors=0)

Metric names follow the Prometheus conventions (`stragglerlab_` prefix, base
units, `_total` for counters). Slowdowns are ratios (1 = no straggling):

    stragglerlab_job_slowdown                          S of the latest window
    stragglerlab_whatif_valid                          1: that S reproduces its trace (5 %)
    stragglerlab_worker_slowdown{dp_rank,stage}        min(S_dp, S_stage) per worker
    stragglerlab_stage_slowdown{stage}                 S_stage
    stragglerlab_optype_slowdown{optype}               attribution by op type
    stragglerlab_cause_slowdown{cause}                 largest estimated slowdown of the
                                                       current findings of a cause (1: none)
    stragglerlab_findings{cause}                       current findings per cause
    stragglerlab_steps_analysed_total                  windows analysed (one per complete step)
    stragglerlab_monitor_errors_total                  errors recorded (garbage parts, ...)
    stragglerlab_analysis_lag_seconds                  latest window's lag (see window.py)
    stragglerlab_last_step                             last step analysed
"""

from __future__ import annotations

import math

from stragglerlab.findings import RootCause

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The exposition format's Content-Type."""
CAUSES = [c.value for c in RootCause if c is not RootCause.NONE]
"""Every cause label (each gets a series, 0 findings when none)."""


def escape(value: str) -> str:
    """A label value escaped as the text format requires."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float | int | None) -> str:
    if v is None:
        return "NaN"
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str,
               samples: list[tuple[dict, float | int | None]]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{text}}} {_num(value)}" if text
                              else f"{name} {_num(value)}")


def metrics_text(window: dict | None, steps_analysed: int, errors: int) -> str:
    """The /metrics body for the latest window (None: nothing analysed yet)."""
    w = _Writer()
    w.family("stragglerlab_steps_analysed_total", "counter",
             "Windows analysed, one per complete step.", [({}, steps_analysed)])
    w.family("stragglerlab_monitor_errors_total", "counter",
             "Errors the monitor recorded (garbage trace parts, failed analyses).",
             [({}, errors)])
    if window is None:
        return "\n".join(w.lines) + "\n"
    w.family("stragglerlab_job_slowdown", "gauge",
             "Job slowdown S = T / T_ideal of the latest window (1 = no straggling).",
             [({}, window.get("slowdown"))])
    valid = window.get("valid")
    w.family("stragglerlab_whatif_valid", "gauge",
             "1 when the latest window's simulation reproduces its trace within 5 % (the "
             "paper's cut), 0 when it does not: its S is then the model's, not the job's.",
             [({}, None if valid is None else int(bool(valid)))])
    grid = window.get("worker_slowdown") or []
    w.family("stragglerlab_worker_slowdown", "gauge",
             "Worker score min(S_dp, S_stage) of the latest window.",
             [({"dp_rank": str(d), "stage": str(p)}, v)
              for p, row in enumerate(grid) for d, v in enumerate(row)])
    w.family("stragglerlab_stage_slowdown", "gauge", "S_stage of the latest window.",
             [({"stage": k}, v) for k, v in (window.get("stage_slowdown") or {}).items()])
    w.family("stragglerlab_optype_slowdown", "gauge",
             "Slowdown attributed to one op type in the latest window.",
             [({"optype": k}, v) for k, v in (window.get("optype_slowdown") or {}).items()])
    findings = window.get("findings") or []
    cost = {c: 1.0 for c in CAUSES}
    count = {c: 0 for c in CAUSES}
    for f in findings:
        c = f["cause"]
        count[c] = count.get(c, 0) + 1
        est = f.get("estimated_slowdown") or 1.0
        cost[c] = max(cost.get(c, 1.0), est)
    w.family("stragglerlab_cause_slowdown", "gauge",
             "Largest estimated job slowdown of the current findings of a cause (1 = none).",
             [({"cause": c}, v) for c, v in cost.items()])
    w.family("stragglerlab_findings", "gauge", "Current findings of a cause.",
             [({"cause": c}, v) for c, v in count.items()])
    lag = window.get("lag_from_step_end_s")
    w.family("stragglerlab_analysis_lag_seconds", "gauge",
             "Latest window: seconds from its last step's end (or from when its records "
             "were read) to its analysis being published.",
             [({}, window.get("lag_s") if lag is None else lag)])
    w.family("stragglerlab_last_step", "gauge", "Last step analysed.",
             [({}, window.get("step"))])
    return "\n".join(w.lines) + "\n"
