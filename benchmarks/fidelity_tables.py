"""Tables of the fidelity suite (benchmarks/fidelity.py) from its run folders.

* §6: the `table_s6` figure (measured S, what-if S with the mean and the
  median ideal, errors, spread, victim hottest), plus its acceptance checks
  (error <= 5% with the default ideal, measured within ±0.07 of the paper's);
* clean runs: per layout, what-if S (mean and median ideal) over the repeats,
  the worst run, and the median simulation discrepancy (acceptance: S <= 1.04 in
  every run, aim 1.03; discrepancy median <= 2%);
* mitigations: the `table_mitigation` figure (gain per seed, mean and spread
  beside the paper's) and the baselines' own S (seq-imbalance should reach 1.2).

A library of benchmarks/fidelity.py; `fidelity.py --report` rebuilds the tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from stragglerlab.figures import sim_discrepancy_cdf, table_mitigation, table_s6
from stragglerlab.figures.data import FigureData, load_figure_data
from stragglerlab.figures.tables import Spread, markdown_table, paired_ratio
from stragglerlab.util.errors import InputError

CLEAN_LAYOUTS = ("clean-dp2-pp2", "clean-dp4-pp4")
CLEAN_S_MAX = 1.04
"""Acceptance: every clean run's S at most this (the aim is 1.03)."""
CLEAN_DISCREPANCY_MEDIAN_PCT = 2.0
"""Acceptance: median simulation discrepancy of the clean runs, % (paper: 1.3%)."""
S6_ERROR_PCT = 5.0
S6_MEASURED_TOL = 0.07
MITIGATION_MIN_PCT = {"seq": 10.0, "stage": 5.0, "gc": 8.0}


def _ideal_s(run, ideal: str) -> float | None:
    block = ((run.whatif or {}).get("compute_ideals") or {}).get(ideal) or {}
    value = block.get("slowdown", (run.whatif or {}).get("slowdown") if ideal == "mean" else None)
    return float(value) if isinstance(value, (int, float)) else None


def _discrepancy_pct(run) -> float | None:
    """Simulation discrepancy of a run, % (whatif.json holds actual / simulated)."""
    d = (run.whatif or {}).get("simulation_discrepancy")
    return 100.0 * abs(float(d) - 1.0) if isinstance(d, (int, float)) else None


def clean_table(data: FigureData) -> tuple[str, dict]:
    """Markdown and numbers of the clean runs of both layouts."""
    header = ["scenario", "runs", "S mean ideal\nmean ±sd (min–max)", "S median ideal\nmean",
              "worst S\n(default ideal)", "discrepancy\nmedian", "discrepancy\nmax",
              f"S <= {CLEAN_S_MAX}",
              f"disc. <= {CLEAN_DISCREPANCY_MEDIAN_PCT:g}%"]
    rows, doc = [], {}
    for name in CLEAN_LAYOUTS:
        runs = [r for r in data.by_scenario(name) if r.whatif is not None]
        s_mean = [v for v in (_ideal_s(r, "mean") for r in runs) if v is not None]
        s_med = [v for v in (_ideal_s(r, "median") for r in runs) if v is not None]
        disc = [v for v in map(_discrepancy_pct, runs) if v is not None]
        if not s_mean:
            rows.append([name, "0", *["-"] * (len(header) - 2)])
            continue
        sp = Spread.of(s_mean)
        # Judged on the §6 table's default ideal, like the §6 verdict; the other is shown.
        worst = max(s_med if table_s6.DEFAULT_IDEAL == "median" and s_med else s_mean)
        med_disc = float(np.median(disc)) if disc else float("nan")
        doc[name] = {"runs": len(runs), "s_mean_ideal": s_mean, "s_median_ideal": s_med,
                     "discrepancy_pct": disc, "worst_s": worst,
                     "discrepancy_median_pct": med_disc,
                     "s_ok": worst <= CLEAN_S_MAX,
                     "discrepancy_ok": med_disc <= CLEAN_DISCREPANCY_MEDIAN_PCT}
        rows.append([name, str(len(runs)), f"{sp.mean:.3f} {sp.cell(3)}",
                     f"{np.mean(s_med):.3f}" if s_med else "-", f"{worst:.3f}",
                     f"{med_disc:.2f}%", f"{max(disc):.2f}%" if disc else "-",
                     "yes" if doc[name]["s_ok"] else "NO",
                     "yes" if doc[name]["discrepancy_ok"] else "NO"])
    return markdown_table(header, rows), doc


def s6_checks(ours: dict) -> list[str]:
    """Acceptance lines of the §6 table (levels that ran)."""
    lines = []
    suffix = "_median_ideal" if table_s6.DEFAULT_IDEAL == "median" else ""
    for level, paper in table_s6.PAPER_MEASURED.items():
        key = f"level{level}"
        if f"{key}_measured" not in ours:
            continue
        meas = float(ours[f"{key}_measured"])
        err = ours.get(f"{key}_error{suffix}_pct")
        ok_meas = abs(meas - paper) <= S6_MEASURED_TOL
        ok_err = err is not None and abs(float(err)) <= S6_ERROR_PCT
        # 3 decimals: meas is already rounded to 3, and rounding it again to 2 can disagree
        # with the table's own rounding of the mean (1.135 read 1.14 beside the table's 1.13).
        lines.append(f"- level {level}: measured {meas:.3f} vs paper {paper:.2f} "
                     f"({'within' if ok_meas else 'OUTSIDE'} ±{S6_MEASURED_TOL}); error with the "
                     f"{table_s6.DEFAULT_IDEAL} ideal {err if err is not None else '-'}% "
                     f"({'<=' if ok_err else 'NOT <='} {S6_ERROR_PCT:g}%); victim hottest "
                     f"{ours.get(f'{key}_victim_hottest', '-')}")
    return lines


def sizing_lines(data: FigureData, ours: dict) -> list[str]:
    """Re-size the §6 factors from what was measured: the compute share c each level's
    measured S implies in the 1F1B model (stragglerlab/scenarios/costmodel.py), and the factors
    that the mean c gives for the paper's levels (edit config/scenarios.yaml with them)."""
    from stragglerlab.scenarios.costmodel import slow_worker_factor

    shares, layout = [], None
    for level, name in table_s6.LEVELS.items():
        runs = data.by_scenario(name)
        meas = ours.get(f"level{level}_measured")
        factors = [float(f["requested"]["factor"]) for r in runs for f in r.faults
                   if f.get("kind") == "slow-worker" and (f.get("requested") or {}).get("factor")]
        if not runs or meas is None or not factors or float(meas) <= 1.0:
            continue
        sc = runs[0].record.get("scenario") or {}
        par = sc.get("parallel") or {}
        pp, m = int(par.get("pp", runs[0].meta.pp_size)), int(par.get("microbatches", 4))
        layout = (pp, m)
        f = float(np.mean(factors))
        shares.append((float(meas) - 1.0) * (m + pp - 1) / ((f - 1.0) * m))
    if not shares or layout is None:
        return []
    c = min(1.0, max(0.05, float(np.mean(shares))))
    pp, m = layout
    fit = [slow_worker_factor(t, pp=pp, microbatches=m, compute_share=c)
           for t in table_s6.PAPER_MEASURED.values()]
    return [f"- sizing: measured S implies compute shares {', '.join(f'{x:.2f}' for x in shares)} "
            f"(model default 0.80); with c = {c:.2f} the paper's levels need factors "
            f"{' / '.join(f'{x:.3g}' for x in fit)}"]


_COMPUTE = ("forward-compute", "backward-compute")


def _peer_compute_s(run, victims: set[tuple[int, int]]) -> float | None:
    """Mean compute-op duration of the workers that are not victims, s."""
    try:
        t = run.trace()
    except (InputError, OSError):  # a diagnostic column: a bad trace reads '-'
        return None
    keep = t["optype"].isin(_COMPUTE).to_numpy()
    dp, stage = t["dp_rank"].to_numpy(), t["stage"].to_numpy()
    for d, p in victims:
        keep = keep & ~((dp == d) & (stage == p))  # to_numpy() may be a read-only view
    return float(t["duration"].to_numpy()[keep].mean()) if keep.any() else None


def s6_runs_table(data: FigureData) -> str:
    """Each §6 run beside the clean run of its seed (`paired_ratio`, as the §6 table pairs
    them): measured S, the what-if S with both ideals and their errors, and the host drift,
    the non-victim workers' mean compute time over the clean run's. Measured S is a ratio
    of two runs minutes apart, so a host that runs every rank slower meanwhile (drift > 1)
    inflates it; the what-if S, taken within one run, does not see that."""
    clean = data.by_scenario(table_s6.CLEAN)
    header = ["level", "seed", "measured S", "est. S mean (error)", "est. S median (error)",
              "host drift"]
    rows = []
    for level, name in table_s6.LEVELS.items():
        for run in sorted(data.by_scenario(name), key=lambda r: r.seed):
            pair = paired_ratio([run], clean)
            if run.whatif is None or pair is None:
                continue
            cells = []
            for ideal in ("mean", "median"):
                est = _ideal_s(run, ideal)
                cells.append("-" if est is None else
                             f"{est:.3f} ({100 * (est / pair.ratio - 1):+.1f}%)")
            victims = {(int(t["dp_rank"]), int(t["stage"])) for f in run.faults
                       for t in f.get("targets") or [] if f.get("kind") == "slow-worker"}
            peer = _peer_compute_s(run, victims)
            peer0 = _peer_compute_s(pair.runs_b[0], victims)
            drift = f"{peer / peer0:.3f}" if peer and peer0 else "-"
            rows.append([str(level), str(run.seed), f"{pair.ratio:.3f}", *cells, drift])
    return markdown_table(header, rows) if rows else "no data"


def baseline_s_lines(data: FigureData) -> list[str]:
    """What-if S of each mitigation's straggling baseline and mitigated twin."""
    lines = []
    for m in table_mitigation.MITIGATIONS:
        parts = []
        for name in (m.baseline, m.mitigated):
            vals = [v for v in (_ideal_s(r, "mean") for r in data.by_scenario(name))
                    if v is not None]
            if vals:
                sp = Spread.of(vals)
                parts.append(f"{name} S {sp.mean:.3f} {sp.cell(3)}")
        if parts:
            gate = MITIGATION_MIN_PCT.get(m.key)
            lines.append(f"- {m.label} (target gain >= +{gate:g}%): " + "; ".join(parts))
    return lines


def build_report(run_dirs: list[Path], out: Path) -> tuple[str, dict]:
    """(markdown, JSON document) of every table; the §6 and mitigation tables and the
    discrepancy CDF as figures into OUT/figures/."""
    data = load_figure_data(run_dirs)
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    s6 = table_s6.build(data, fig_dir)
    mit = table_mitigation.build(data, fig_dir)
    disc = sim_discrepancy_cdf.build(data, fig_dir)  # every run of the suite
    clean_md, clean_doc = clean_table(data)
    loads = []
    for d in run_dirs:
        try:
            info = json.loads((Path(d) / "fidelity.json").read_text())
            loads.append(float(info["loadavg_before"].split()[0]))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    md = [f"# Fidelity suite ({len(run_dirs)} runs)", ""]
    if loads:
        md += [f"Load average (1 min) before the runs: median {np.median(loads):.2f}, max "
               f"{max(loads):.2f} (timing is only meaningful on an otherwise idle machine).", ""]
    md += ["## §6: slow worker at DP 4 x PP 4", "",
           s6.ours.get("markdown", "no data"), "", s6.note, "", *s6_checks(s6.ours),
           *sizing_lines(data, s6.ours), "",
           "Per run (host drift: the non-victim workers' mean compute time over the clean "
           "run's of the same seed; measured S is a ratio of two runs, the what-if S is "
           "taken within one):", "", s6_runs_table(data), "",
           "## Clean runs", "", clean_md, "",
           "## Mitigations", "", mit.ours.get("markdown", "no data"), "", mit.note, "",
           *baseline_s_lines(data), "",
           "## Simulation discrepancy, all runs", "", disc.note, ""]
    doc = {"runs": [str(d) for d in run_dirs], "s6": s6.ours, "s6_note": s6.note,
           "clean": clean_doc, "mitigations": mit.ours, "sim_discrepancy": disc.ours,
           "loadavg_before": loads}
    return "\n".join(md), doc
