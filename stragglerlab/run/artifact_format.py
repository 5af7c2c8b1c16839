"""The what-if result in the OSDI'25 artifact's own JSON layout (result.json, mw.json, ms.json).

Anyone can diff these files against the paper's tool output, e.g. with
the artifact's `tools/compare_results.py EXPECTED ACTUAL`. Keys and conventions are
the artifact's: "blocking" is the straggler slowdown S, "launch" the
actual/no-delay ratio; "noblk" is the ideal; blocking decompositions are only
filled when S >= 1.03, launch decompositions when the launch slowdown is >= 1.03
(analysis/launch.py); dict entries of slowdowns are ordered by decreasing value.
"""

from __future__ import annotations

from stragglerlab.run.results import FixMetric, WhatIfResult

ATTRIBUTION_MIN_SLOWDOWN = 1.03


def _desc(d: dict) -> dict:
    return dict(sorted(d.items(), key=lambda kv: -kv[1]))


def result_json(r: WhatIfResult) -> dict:
    """result.json."""
    base, nodelay, ideal = r.step_time_base, r.step_time_nodelay, r.step_time_ideal
    launch_step = {str(s): float(a / b) for s, a, b in zip(r.steps, base.values, nodelay.values)}
    out = {
        "job_meta": r.job_meta.to_dict(),
        "step_t_base": base.as_dict(),
        "step_t_nodelay": nodelay.as_dict(),
        "step_t_noblk": ideal.as_dict(),
        "launch_slowdown": r.simulation_discrepancy,
        "blocking_slowdown": r.slowdown,
        "blocking_step_slowdown": _desc(r.step_slowdown()),
        "launch_step_slowdown": _desc(launch_step),
    }
    attribute = r.slowdown >= ATTRIBUTION_MIN_SLOWDOWN
    tables = (("dp_rank", r.by_dp_rank), ("stage", r.by_stage), ("optype", r.by_optype))
    for name, table in tables:
        out[f"blocking_decompose_by_{name}"] = (
            _desc({str(k): float(v) for k, v in r.slowdown_by(table).items()})
            if attribute else None
        )
        launch = r.launch_slowdown_by(name)
        out[f"launch_decompose_by_{name}"] = None if launch is None else _desc(launch)
    for name, table in tables:
        if attribute:
            per_step = {}
            for i, s in enumerate(r.steps):
                row = {str(k): float(v.values[i] / ideal.values[i]) for k, v in table.items()}
                per_step[str(s)] = _desc(row)
            out[f"blocking_decompose_by_{name}_per_step"] = dict(
                sorted(per_step.items(), key=lambda kv: -r.step_slowdown()[kv[0]])
            )
        else:
            out[f"blocking_decompose_by_{name}_per_step"] = None
        launch_per_step = r.launch_step_slowdown_by(name)
        out[f"launch_decompose_by_{name}_per_step"] = None if launch_per_step is None else {
            s: _desc(launch_per_step[s]) for s in launch_step}
    return out


def fix_json(m: FixMetric, key: str) -> dict:
    """mw.json (key 'Mw') or ms.json (key 'Ms')."""
    return {
        "trem": m.t_rem,
        "tadd": m.t_add,
        "tori": m.t_ori,
        "tideal": m.t_ideal,
        "rem": m.rem,
        "add": m.add,
        key: m.rem,
    }
