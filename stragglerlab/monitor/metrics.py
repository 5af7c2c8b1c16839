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
    stragglerlab_node_lost{node}                       1: a cluster run's node is lost (0: up)
    stragglerlab_ranks_lost                            ranks on lost nodes
"""

from __future__ import annotations

import math

from stragglerlab.run.findings import RootCause

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


Family = tuple[str, str, str, list[tuple[dict, float | int | None]]]
"""One metric family: (name, type, help text, [(labels, value), ...])."""


def render(families: list[Family]) -> str:
    """Families in the text format: HELP and TYPE once, then every sample of the family."""
    lines: list[str] = []
    for name, kind, help_text, samples in families:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {_num(value)}" if text else f"{name} {_num(value)}")
    return "\n".join(lines) + "\n"


def families(window: dict | None, steps_analysed: int, errors: int,
             nodes: list[dict] | None = None) -> list[Family]:
    """The metric families of one job's latest window (None: nothing analysed yet), and of
    its nodes on a cluster run (nodes.json; none on one host)."""
    out: list[Family] = []

    def family(name: str, kind: str, help_text: str,
               samples: list[tuple[dict, float | int | None]]) -> None:
        out.append((name, kind, help_text, samples))

    if nodes:
        family("stragglerlab_node_lost", "gauge",
               "1 when a node of the cluster run is lost (its helper stopped answering or "
               "Ray reports it dead), 0 while it is up.",
               [({"node": n["node_id"]}, int(n["lost"])) for n in nodes])
        family("stragglerlab_ranks_lost", "gauge",
               "Ranks on lost nodes: the windows go on without them.",
               [({}, sum(len(n["ranks"]) for n in nodes if n["lost"]))])

    family("stragglerlab_steps_analysed_total", "counter",
           "Windows analysed, one per complete step.", [({}, steps_analysed)])
    family("stragglerlab_monitor_errors_total", "counter",
           "Errors the monitor recorded (garbage trace parts, failed analyses).",
           [({}, errors)])
    if window is None:
        return out
    family("stragglerlab_job_slowdown", "gauge",
           "Job slowdown S = T / T_ideal of the latest window (1 = no straggling).",
           [({}, window.get("slowdown"))])
    valid = window.get("valid")
    family("stragglerlab_whatif_valid", "gauge",
           "1 when the latest window's simulation reproduces its trace within 5 % (the "
           "paper's cut), 0 when it does not: its S is then the model's, not the job's.",
           [({}, None if valid is None else int(bool(valid)))])
    grid = window.get("worker_slowdown") or []
    family("stragglerlab_worker_slowdown", "gauge",
           "Worker score min(S_dp, S_stage) of the latest window.",
           [({"dp_rank": str(d), "stage": str(p)}, v)
            for p, row in enumerate(grid) for d, v in enumerate(row)])
    family("stragglerlab_stage_slowdown", "gauge", "S_stage of the latest window.",
           [({"stage": k}, v) for k, v in (window.get("stage_slowdown") or {}).items()])
    family("stragglerlab_optype_slowdown", "gauge",
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
    family("stragglerlab_cause_slowdown", "gauge",
           "Largest estimated job slowdown of the current findings of a cause (1 = none).",
           [({"cause": c}, v) for c, v in cost.items()])
    family("stragglerlab_findings", "gauge", "Current findings of a cause.",
           [({"cause": c}, v) for c, v in count.items()])
    lag = window.get("lag_from_step_end_s")
    family("stragglerlab_analysis_lag_seconds", "gauge",
           "Latest window: seconds from its last step's end (or from when its records "
           "were read) to its analysis being published.",
           [({}, window.get("lag_s") if lag is None else lag)])
    family("stragglerlab_last_step", "gauge", "Last step analysed.",
           [({}, window.get("step"))])
    return out


def metrics_text(window: dict | None, steps_analysed: int, errors: int,
                 nodes: list[dict] | None = None) -> str:
    """The /metrics body of one job's latest window (None: nothing analysed yet)."""
    return render(families(window, steps_analysed, errors, nodes))


JOB_LABEL = "job_name"
"""The label naming the job in a monitor of several jobs. Not `job` or `instance`: those
are the target labels Prometheus attaches itself (a scraped `job` would be renamed
`exported_job`, or replace the scrape config's with honor_labels)."""


def jobs_metrics_text(jobs: list[tuple], max_worker_series: int,
                      refused: int = 0) -> str:
    """The /metrics body of a monitor of several jobs: each job's families (`families`) with
    a `job_name` label first, one HELP/TYPE per family. `jobs`: (name, latest window or
    None, windows analysed, errors[, nodes]) per job. A job's `stragglerlab_worker_slowdown` keeps
    its `max_worker_series` highest-scored workers (the rest are counted in
    `stragglerlab_worker_series_dropped`), so the series are bounded by the number of jobs
    times a fixed count per job."""
    merged: dict[str, Family] = {}
    merged["stragglerlab_jobs"] = ("stragglerlab_jobs", "gauge",
                                   "Jobs this monitor watches (live or ended).",
                                   [({}, len(jobs))])
    merged["stragglerlab_jobs_refused_total"] = (
        "stragglerlab_jobs_refused_total", "counter",
        "Run folders not watched because the monitor already watched its most jobs, none "
        "of them ended (--max-jobs).", [({}, refused)])
    dropped: list[tuple[dict, float | int | None]] = []
    for name, window, steps, errors, *nodes in jobs:
        label = {JOB_LABEL: name}
        for fam, kind, help_text, samples in families(window, steps, errors,
                                                      nodes[0] if nodes else None):
            if fam == "stragglerlab_worker_slowdown":
                keep = sorted(samples, key=_score, reverse=True)[:max_worker_series] \
                    if len(samples) > max_worker_series else samples
                dropped.append((label, len(samples) - len(keep)))
                samples = keep
            into = merged.setdefault(fam, (fam, kind, help_text, []))[3]
            into.extend(({**label, **labels}, v) for labels, v in samples)
    merged["stragglerlab_worker_series_dropped"] = (
        "stragglerlab_worker_series_dropped", "gauge",
        f"Workers of a job left out of stragglerlab_worker_slowdown (only the "
        f"{max_worker_series} highest-scored are exported).", dropped)
    return render(list(merged.values()))


def _score(sample: tuple[dict, float | int | None]) -> float:
    v = sample[1]
    return -math.inf if v is None or math.isnan(float(v)) else float(v)
