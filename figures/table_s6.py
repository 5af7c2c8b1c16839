"""§6 table: injected slow worker, measured job slowdown vs the what-if estimate, three levels.

For `slow-worker-1/2/3` (DP 4 x PP 4, the paper's trace-AR layout), each run one
repeat. The slow worker starts after a few clean traced steps, which are the
control (figures/s6_control.py): measured = mean step time in the fault window /
the same run's clean steps before it; estimated = the what-if S of the window over the
what-if S of those clean steps (the noise they straggle by is in both ratios); every
run's error is shown (the worst beside the mean), and the host drift the control
removes (the bystanders' compute against the clean run of the same seed). Runs
without clean steps before the fault (older ones) fall back to a ratio between
processes, against the clean run of the same layout (`clean-dp4-pp4`; runs of
another layout pair with `clean-dp<d>-pp<p>`) over matching seeds:
measured = mean step time of the slow run / mean step time of the clean run
(run.json step times of the traced steps, replicas of a seed averaged), given
as the mean over repeats with its spread (sd, min–max); estimated = the
what-if S of the slow runs with the paper's mean compute ideal and with the
median compute ideal (whatif.json `compute_ideals`, written by `stragglerlab
whatif`; the analysis is not re-run here), each with its spread and its error
= estimated / measured - 1; and how many runs have the victim as the hottest
cell of the worker heatmap. The verdict uses DEFAULT_IDEAL, the paper's mean
(a slow worker is 1/16 of each op type's mean and moves it; the median leaves
it alone, but sits low on quota-quantised CPU op times); both are reported. The 4-worker extras
(`slow-worker-<n>-dp2-pp2` vs `clean-dp2-pp2`) get rows when they ran.
Paper: measured 1.16/1.40/2.03, estimated 1.21/1.42/1.98.

Built by `stragglerlab figures --runs ... --only table_s6 --out DIR`
(and by `benchmarks/fidelity.py`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from stragglerlab.figures.data import FigureData, RunSummary
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.s6_control import InRun, in_run
from stragglerlab.figures.tables import Spread, draw_table, markdown_table, paired_ratio

NAME = "table_s6"
TITLE = "§6: injected slow worker, measured vs estimated job slowdown"
PAPER = "measured 1.16/1.40/2.03 vs estimated 1.21/1.42/1.98"
CLEAN = "clean-dp4-pp4"
"""Baseline of the main levels (their layout); other layouts pair with clean-dp<d>-pp<p>."""
LEVELS = {1: "slow-worker-1", 2: "slow-worker-2", 3: "slow-worker-3"}
EXTRAS = {1: "slow-worker-1-dp2-pp2", 2: "slow-worker-2-dp2-pp2", 3: "slow-worker-3-dp2-pp2"}
"""The documented 4-worker variants: rows only when they ran."""
PAPER_MEASURED = {1: 1.16, 2: 1.40, 3: 2.03}
PAPER_ESTIMATED = {1: 1.21, 2: 1.42, 3: 1.98}
DEFAULT_IDEAL = "mean"
"""The compute ideal the table's verdict uses (both are shown): the method's own, as in
design.md §4, the artifact and the paper's estimated column, so the errors compare like
with like. Its known bias: the slow worker is 1/16 of each compute type's mean and slows
the ideal itself, by about (S - 1) (m + pp - 1) / (16 m) of a clean step
(`costmodel.mean_ideal_shortfall`); with 4 microbatches per step that kept level 3 at
-5.9 / -7.0 %, with 16 (the scenarios now) about two thirds of that. The median ignores one slow
worker of 16 but sits below the typical op on quota-quantised CPU op times (clean
dp4-pp4 S with the median 1.069 at 4 x 1024-token microbatches, 1.048 at 16), so it
leans high. The default was the median until the first 3-repeat run (chosen on a 3-step
smoke run) and was switched to the mean after it; it has stayed the mean since, whatever
later runs showed, which is why both columns stay in the table."""
HEADER = ["level", "scenario", "seeds", "injected factor\n(measured)", "control",
          "measured S\n(ours)", "spread\nsd (min–max)", "est. S, mean\nideal (ours)",
          "error\n(mean)", "worst run error\n(mean; net of its\nown shortfall)",
          "est. S, median\nideal (ours)",
          "error\n(median)", "spread of est.\n(median)", "host drift\nremoved",
          "victim\nhottest", "measured S\n(paper)", "estimated S\n(paper)", "error\n(paper)"]
INPUTS = ("runs", "whatif", "traces")
"""Run-folder files this figure reads (figures/registry.py)."""


def _factor(runs: list[RunSummary]) -> str:
    """Injected slow-down factor as requested (and as the injector measured it)."""
    req, meas = [], []
    for run in runs:
        for f in run.faults:
            if f.get("kind") == "slow-worker":
                if (f.get("requested") or {}).get("factor") is not None:
                    req.append(float(f["requested"]["factor"]))
                if (f.get("measured") or {}).get("factor") is not None:
                    meas.append(float(f["measured"]["factor"]))
    if not req:
        return "-"
    return f"{np.mean(req):.2f}" + (f" ({np.mean(meas):.2f})" if meas else "")


def _ideal_block(run: RunSummary, ideal: str) -> dict | None:
    ideals = (run.whatif or {}).get("compute_ideals")
    block = ideals.get(ideal) if isinstance(ideals, dict) else None
    return block if isinstance(block, dict) else None


def median_ideal_slowdown(run: RunSummary) -> float | None:
    """What-if S of a run with compute ops idealized by their median instead of the mean,
    from its whatif.json (None when the file predates `compute_ideals`)."""
    value = (_ideal_block(run, "median") or {}).get("slowdown")
    return float(value) if isinstance(value, (int, float)) else None


def mean_ideal_slowdown(run: RunSummary) -> float | None:
    """What-if S with the paper's mean ideal (top-level `slowdown` of older files)."""
    value = (_ideal_block(run, "mean") or {}).get("slowdown", (run.whatif or {}).get("slowdown"))
    return float(value) if isinstance(value, (int, float)) else None


def victim_is_hottest(run: RunSummary, ideal: str = DEFAULT_IDEAL) -> bool | None:
    """Whether the slow worker is the hottest cell of the worker heatmap (S_w, [pp][dp]);
    None when the run has no heatmap or no slow-worker target."""
    block = _ideal_block(run, ideal) or _ideal_block(run, "mean") or {}
    score = block.get("worker_score")
    targets = [t for f in run.faults if f.get("kind") == "slow-worker"
               for t in f.get("targets") or []]
    if not isinstance(score, list) or not score or len(targets) != 1:
        return None
    grid = np.asarray(score, dtype=float)
    stage, dp = np.unravel_index(int(np.nanargmax(grid)), grid.shape)
    return (int(stage), int(dp)) == (int(targets[0]["stage"]), int(targets[0]["dp_rank"]))


def _clean_for(data: FigureData, runs: list[RunSummary]) -> str:
    """Baseline scenario: the clean run of the slow runs' (most common) layout."""
    layouts = Counter((r.meta.dp_size, r.meta.pp_size) for r in runs)
    if not layouts:
        return CLEAN
    dp, pp = layouts.most_common(1)[0][0]
    return f"clean-dp{dp}-pp{pp}"


def level_row(data: FigureData, level: int, scenario: str | None = None, key: str | None = None
              ) -> tuple[list[str], dict[str, float | str], list[RunSummary]]:
    """Table row, `ours` entries and runs used of one level ('-' cells where data is missing)."""
    scenario = scenario or LEVELS[level]
    key = key or f"level{level}"
    pm, pe = PAPER_MEASURED[level], PAPER_ESTIMATED[level]
    paper_cells = [f"{pm:.2f}", f"{pe:.2f}", f"{100 * (pe / pm - 1):+.1f}%"]
    slow = data.by_scenario(scenario)
    clean = data.by_scenario(_clean_for(data, slow))
    controlled = [(r, m) for r in slow if r.ok and (m := in_run(r, clean)) is not None]
    if controlled:
        return _in_run_row(level, scenario, key, controlled, paper_cells)
    pair = paired_ratio(slow, clean)
    if pair is None:
        return [str(level), scenario, *["-"] * (len(HEADER) - 5), *paper_cells], {}, []
    measured = Spread.of(pair.ratios)
    ours: dict[str, float | str] = {
        f"{key}_measured": round(pair.ratio, 3), f"{key}_seeds": len(pair.seeds),
        f"{key}_measured_sd": round(measured.sd, 4), f"{key}_measured_min": round(measured.lo, 3),
        f"{key}_measured_max": round(measured.hi, 3)}
    est_runs = [r for r in pair.runs_a if r.whatif is not None]
    cells: dict[str, str] = {}
    for ideal, read, suffix in (("mean", mean_ideal_slowdown, ""),
                                ("median", median_ideal_slowdown, "_median_ideal")):
        values = [v for v in map(read, est_runs) if v is not None]
        if not values:
            continue
        est = Spread.of(values)
        err = 100.0 * (est.mean / pair.ratio - 1.0)
        ours[f"{key}_estimated{suffix}"] = round(est.mean, 3)
        ours[f"{key}_estimated{suffix}_sd"] = round(est.sd, 4)
        ours[f"{key}_error{suffix}_pct"] = round(err, 1)
        cells[ideal] = f"{est.mean:.2f}"
        cells[ideal + "_err"] = f"{err:+.1f}%"
        cells[ideal + "_spread"] = est.cell()
    hot = [h for h in (victim_is_hottest(r) for r in est_runs) if h is not None]
    if hot:
        ours[f"{key}_victim_hottest"] = f"{sum(hot)}/{len(hot)}"
    seeds = ",".join(str(s) for s in pair.seeds)
    n = len(pair.runs_a)
    ours[f"{key}_control"] = "clean run"
    row = [str(level), scenario, f"{seeds} ({n} run{'s' if n > 1 else ''})",
           _factor(pair.runs_a), "clean run", f"{pair.ratio:.2f}", measured.cell(),
           cells.get("mean", "-"), cells.get("mean_err", "-"), "-", cells.get("median", "-"),
           cells.get("median_err", "-"), cells.get("median_spread", "-"), "-",
           f"{sum(hot)}/{len(hot)}" if hot else "-", *paper_cells]
    return row, ours, pair.runs_a + pair.runs_b


def _in_run_row(level: int, scenario: str, key: str, controlled: list[tuple[RunSummary, InRun]],
                paper_cells: list[str]) -> tuple[list[str], dict, list[RunSummary]]:
    """A level measured against each run's own clean steps (figures/s6_control.py): the
    measured S, the what-if S of the fault window, every run's error and the host drift
    the control removes."""
    unsteady = [f"{r.seed}: {m.in_run_drift:.3f}" for r, m in controlled if not m.steady]
    runs = [r for r, _ in controlled]
    ms = [m for _, m in controlled]
    measured = Spread.of([m.measured for m in ms])
    ours: dict = {f"{key}_control": "in-run", f"{key}_seeds": len({r.seed for r in runs}),
                  f"{key}_measured": round(measured.mean, 3),
                  f"{key}_measured_sd": round(measured.sd, 4),
                  f"{key}_measured_min": round(measured.lo, 3),
                  f"{key}_measured_max": round(measured.hi, 3),
                  f"{key}_clean_steps": min(m.clean_steps for m in ms)}
    cells = {}
    for ideal, suffix in (("mean", ""), ("median", "_median_ideal")):
        est = Spread.of([m.estimated[ideal] for m in ms])
        errs = [100.0 * m.error(ideal) for m in ms]
        ours[f"{key}_estimated{suffix}"] = round(est.mean, 3)
        ours[f"{key}_estimated{suffix}_sd"] = round(est.sd, 4)
        ours[f"{key}_window_S{suffix}"] = [round(m.window_slowdown[ideal], 3) for m in ms]
        ours[f"{key}_clean_steps_S{suffix}"] = [round(m.clean_slowdown[ideal], 3) for m in ms]
        ours[f"{key}_error{suffix}_pct"] = round(100.0 * (est.mean / measured.mean - 1), 1)
        ours[f"{key}_run_errors{suffix}_pct"] = [round(e, 1) for e in errs]
        worst = max(errs, key=abs)
        ours[f"{key}_worst_error{suffix}_pct"] = round(worst, 1)
        cells[ideal] = f"{est.mean:.2f}"
        cells[ideal + "_err"] = f"{ours[f'{key}_error{suffix}_pct']:+.1f}%"
        cells[ideal + "_worst"] = f"{worst:+.1f}%"
        cells[ideal + "_spread"] = est.cell()
    # The mean ideal's error net of its own predicted shortfall (the median has none).
    net = [100.0 * m.net_error("mean") for m in ms]
    worst_net = max(net, key=abs)
    ours[f"{key}_mean_shortfall_pct"] = [round(100.0 * m.mean_shortfall, 1) for m in ms]
    ours[f"{key}_run_errors_net_pct"] = [round(e, 1) for e in net]
    ours[f"{key}_worst_error_net_pct"] = round(worst_net, 1)
    cells["mean_worst"] += f"\n(net {worst_net:+.1f}%)"
    ours[f"{key}_in_run_drift"] = [round(m.in_run_drift, 3) for m in ms]
    ours[f"{key}_unsteady_runs"] = unsteady
    drift = [m.drift for m in ms if m.drift is not None]
    if drift:
        ours[f"{key}_drift_min"], ours[f"{key}_drift_max"] = round(min(drift), 3), \
            round(max(drift), 3)
    hot = [h for h in (victim_is_hottest(r) for r in runs) if h is not None]
    if hot:
        ours[f"{key}_victim_hottest"] = f"{sum(hot)}/{len(hot)}"
    seeds = ",".join(str(s) for s in sorted({r.seed for r in runs}))
    row = [str(level), scenario, f"{seeds} ({len(runs)} run{'s' if len(runs) > 1 else ''})",
           _factor(runs), f"in-run ({ours[f'{key}_clean_steps']}+ clean steps)"
           + (f"; {len(unsteady)} unsteady" if unsteady else ""),
           f"{measured.mean:.2f}", measured.cell(), cells["mean"], cells["mean_err"],
           cells["mean_worst"], cells["median"], cells["median_err"], cells["median_spread"],
           _drift_cell(drift or [m.in_run_drift for m in ms]),
           f"{sum(hot)}/{len(hot)}" if hot else "-", *paper_cells]
    return row, ours, runs


def _drift_cell(drift: list[float]) -> str:
    """The bystanders' drift the control removes (against the clean run of the same seed
    where there is one, else within the run: the fault window over the clean steps)."""
    return f"{min(drift):.3f}–{max(drift):.3f}" if drift else "-"


def _note(ours: dict, workers: int) -> str:
    """The verdict, on the default ideal, with the other beside it."""
    def errs(suffix: str) -> list[float]:
        return [float(v) for k, v in ours.items()
                if k.startswith("level") and k.endswith(f"_error{suffix}_pct")]

    mean_errs, median_errs = errs(""), errs("_median_ideal")
    if not mean_errs and not median_errs:
        return "No what-if results for the slow runs: only the measured slowdown is shown."
    default, other = ((median_errs, mean_errs) if DEFAULT_IDEAL == "median" and median_errs
                      else (mean_errs, median_errs))
    name = "median" if default is median_errs else "mean"
    worst = max(default, key=abs)
    note = (f"With the {name} compute ideal (this table's default) the what-if estimates are "
            f"within {abs(worst):.1f}% of the measured slowdown (paper: within 4.3%); "
            + ("agrees." if abs(worst) <= 5 else "short of it." if worst < 0
               else "ours overestimates it."))
    suffix = "_median_ideal" if name == "median" else ""
    per_run = [abs(float(v)) for k, v in ours.items() if k.startswith("level")
               and k.endswith(f"_worst_error{suffix}_pct")]
    if per_run:
        note += (f" Measured in-run (fault window vs the same run's clean steps), every run "
                 f"is within {max(per_run):.1f}%.")
    net = [abs(float(v)) for k, v in ours.items()
           if k.startswith("level") and k.endswith("_worst_error_net_pct")]
    if net and name == "mean":
        note += (f" Net of the mean ideal's own predicted shortfall (the slow worker is in "
                 f"every compute type's mean over {workers} workers; "
                 f"costmodel.mean_ideal_shortfall), every run is within {max(net):.1f}%.")
    if other:
        other_name = "mean" if name == "median" else "median"
        note += (f" With the {other_name} ideal: within {max(abs(e) for e in other):.1f}%")
        if other_name == "mean":
            note += (f" (each op type's mean over {workers} workers includes the slow one, "
                     "which slows the ideal itself)")
        note += "."
    return note


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Write the §6 table as an image and as markdown in `ours`."""
    rows, ours, used = [], {}, {}
    series = [(LEVELS, "level")] + [(EXTRAS, "extra_level")]
    for levels, prefix in series:
        for level, scenario in levels.items():
            row, o, runs = level_row(data, level, scenario, f"{prefix}{level}")
            if prefix != "level" and not o:
                continue  # the 4-worker extras only when they ran
            rows.append(row)
            ours.update(o)
            used.update({run.path: run for run in runs})
    if not ours:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       f"ok runs of {', '.join(LEVELS.values())} and {CLEAN} with the same seed")
    source = f"testbed runs ({len(used)} jobs)"
    md = markdown_table(HEADER, rows)
    ours["markdown"] = md
    ours["default_ideal"] = DEFAULT_IDEAL
    paths = draw_table(
        Path(out_dir) / NAME, TITLE, HEADER, rows,
        source=f"{source}: slow-worker-1/2/3 vs the clean run of their layout, matching seeds",
        footnote="measured, in-run: mean step time in the fault window / the same run's "
                 "clean steps before it; "
                 "estimated: what-if S of the window / of the clean steps; else slow / "
                 "clean run and the slow run's S; error = estimated / measured - 1; drift: "
                 "bystanders' compute vs the clean run's (what the in-run control removes)")
    workers = max(run.meta.world_size for run in used.values())
    return FigureResult(NAME, paths, source, PAPER, ours, _note(ours, workers), TITLE)
