"""The noise over time of clean runs: what the job-wide rule's threshold stands over.

`whatif_rules/job_wide.py` names a change of the job's step time over a sustained window
of steps (`analysis/over_time.py`) when no rule across ranks named anything. How far
clean runs move that number is measured here, on clean runs only (never on the runs the
rule is scored on), the way the noise floor reads every other threshold
(`whatif_noise.py`): the detector is run with `job_wide_ratio` and
`job_wide_compute_ratio` taken away (1.0; a change is one or the other, by the kind
carrying it, whatever the thresholds) and `job_wide_kind_share` too (0: a collective
kind's added time on every rank, as a share of the step) and the statistic it then
reports is read, over the whole run (from its whatif.json) and over
every sliding window of 4, 6, 8 and 12 steps an online replay or the monitor diagnoses.
Beside it, per run: the step time's robust spread over time (1.4826 x MAD over the
median) and the largest change over a sustained window of any one op kind's time per
step (what `changed_kinds` would read on a clean run).

And the false alarms of the detector as it ships (its configured thresholds, the shipped
floor): findings of any kind, regime changes included, offline and (with --online) in
the online replay, per 1,000 clean worker-steps.

    python benchmarks/over_time_noise.py --runs R/clean-*/* [--online] [--json OUT] \
        [--floor config/noise-floor.yaml]

--floor merges the per-family highest readings into that noise-floor file as the
`job_wide_ratio`, `job_wide_compute_ratio` and `job_wide_kind_share` statistics (whole
run and online windows; --floor-stats: only these), keeping every other number and the
file's header; it refuses a run with a fault.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from stragglerlab.analysis.detectors import load_run
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.detectors.whatif_arbitration import arbitrate
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_evidence import Evidence, read_evidence
from stragglerlab.analysis.detectors.whatif_noise import WINDOW_STEPS
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.over_time import change_point, kind_times, step_times
from stragglerlab.method.noise_floor import read_noise_floor, write_noise_floor
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.trace.meta import LayoutFamily

STATS = ("job_wide_ratio", "job_wide_compute_ratio", "job_wide_kind_share")
"""The job-wide rule's three statistics (a change of the step carried by communication, by
compute; a collective kind's added time on every rank)."""
RELAXED_TO = {"job_wide_ratio": 1.0, "job_wide_compute_ratio": 1.0, "job_wide_kind_share": 0.0}
"""The value that takes each threshold away."""


def _reading(findings, stat: str) -> float | None:
    vals = [f.detail[stat] for f in findings if stat in f.detail]
    return max(vals) if vals else None


def measure(path: str, online: bool) -> dict:
    """One clean run's over-time noise and false alarms (module docstring)."""
    folder = RunFolder(path=Path(path))
    if folder.faults:
        raise SystemExit(f"{path}: has faults; the noise over time is measured on clean runs only")
    run = load_run(path)
    relaxed = replace(WhatIfDetectorConfig(), **RELAXED_TO)
    whole = Signals(run=run, evidence=read_evidence(run), config=relaxed)
    out: dict = {"run": path, "layout": f"dp{run.meta.dp_size}-pp{run.meta.pp_size}",
                 "family": LayoutFamily.of(run.meta.dp_size, run.meta.pp_size).value,
                 "steps": int(run.trace["step"].nunique()),
                 "worker_steps": int(run.trace["step"].nunique() * run.meta.world_size)}
    found = arbitrate(whole)
    for stat in STATS:
        out[stat] = _reading(found, stat)
    steps, sec = step_times(run.trace)
    med = float(np.median(sec))
    out["step_spread"] = float(1.4826 * np.median(np.abs(sec - med)) / med)
    cp = change_point(steps, sec)
    out["step_change"] = None if cp is None else float(cp.factor)
    per_kind = kind_times(run.trace).groupby(["kind", "step"])["time_s"].sum()
    kinds = {}
    for kind in per_kind.index.get_level_values(0).unique():
        series = per_kind.loc[kind].reindex(steps)
        got = change_point(steps, series.to_numpy()) if series.notna().all() else None
        if got is not None:
            kinds[str(kind)] = float(got.factor)
    out["kind_change_max"] = max(kinds.values(), default=None)
    out["kind_change_top"] = max(kinds, key=kinds.get) if kinds else None
    det = WhatIfDetector(relaxed, noise_floor=None)
    cache: dict = {}
    out["online"] = {}
    for w in WINDOW_STEPS:
        vals: dict[str, list[float]] = {stat: [] for stat in STATS}
        for win in det._windows(run, w):
            key = tuple(np.unique(win.trace["step"]))
            if key not in cache:
                cache[key] = arbitrate(Signals(run=win, evidence=Evidence.analyse(win),
                                               config=relaxed))
            for stat in STATS:
                v = _reading(cache[key], stat)
                if v is not None:
                    vals[stat].append(v)
        out["online"][w] = {stat: max(v) if v else None for stat, v in vals.items()}
    shipped = WhatIfDetector()
    found = shipped.detect(run)
    out["findings"] = [f"{f.root_cause.value} {f.first_step}-{f.last_step}" for f in found]
    if online:
        found_online = WhatIfDetector().detect_online(run)
        out["online_findings"] = [f"{f.root_cause.value} {f.first_step}-{f.last_step} "
                                  f"at {f.detected_at_step}" for f in found_online]
    return out


def merge(floor_path: Path, rows: list[dict], stats: tuple[str, ...] = STATS) -> None:
    """Write the per-family highest readings of `stats` into the floor file."""
    floor = read_noise_floor(floor_path)
    header = "".join(line[2:] if line.startswith("# ") else line[1:]
                     for line in floor_path.read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    fams = dict(floor.families)
    n_by = {}
    for fam in {r["family"] for r in rows}:
        mine = [r for r in rows if r["family"] == fam]
        n_by[fam] = len(mine)
        lf = LayoutFamily(fam)
        old = fams.get(lf)
        if old is None:
            continue
        fam_stats = dict(old.statistics)
        online = {w: dict(v) for w, v in old.online.items()}
        for stat in stats:
            whole = [r[stat] for r in mine if r[stat] is not None]
            if whole:
                fam_stats[stat] = max(whole)
            for w in WINDOW_STEPS:
                vals = [r["online"][w][stat] for r in mine
                        if r["online"][w][stat] is not None]
                if vals:
                    online.setdefault(w, {})[stat] = max(vals)
        fams[lf] = replace(old, statistics=fam_stats, online=online)
    note = (", ".join(stats) + ": the job-wide rule's noise over time, "
            "added by\nbenchmarks/over_time_noise.py --floor on fresh clean runs of its own ("
            + ", ".join(f"{k} {v}" for k, v in sorted(n_by.items())) + "), not the runs above.\n")
    lines = header.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith(note[:40])), None)
    if at is not None:  # a note of an earlier merge: replaced
        del lines[at:at + 2]
    header = "".join(lines) + note
    write_noise_floor(floor_path, replace(floor, families=fams), header=header.rstrip("\n"))


def main(argv: list[str] | None = None) -> int:
    """CLI."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", required=True, help="clean run folders (whatif run)")
    p.add_argument("--online", action="store_true", help="also replay the detector online")
    p.add_argument("--json", help="write the per-run rows here")
    p.add_argument("--floor", help="merge the readings into this noise-floor file")
    p.add_argument("--floor-stats", nargs="+", choices=STATS, default=list(STATS),
                   help="merge only these statistics (default: all three)")
    a = p.parse_args(argv)
    rows = []
    for path in a.runs:
        r = measure(path, a.online)
        rows.append(r)
        print(f"{r['run']}: {r['layout']}, {r['steps']} steps, step spread "
              f"{r['step_spread']:.3f}, step change {r['step_change']}, kind change max "
              f"{r['kind_change_max']} ({r['kind_change_top']}), over a run "
              f"{ {st: r[st] for st in STATS} } online {r['online']}, findings "
              f"{r['findings']}"
              + (f" online {r['online_findings']}" if a.online else ""), flush=True)
    ws = sum(r["worker_steps"] for r in rows)
    off = sum(len(r["findings"]) for r in rows)
    print(f"\n{len(rows)} clean runs, {len({r['layout'] for r in rows})} layouts, {ws} "
          f"worker-steps: offline {off} finding(s), {1000 * off / max(ws, 1):.2f} per 1,000 "
          "clean worker-steps")
    if a.online:
        on = sum(len(r["online_findings"]) for r in rows)
        print(f"online {on} finding(s), {1000 * on / max(ws, 1):.2f} per 1,000 clean "
              "worker-steps")
    for fam in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == fam]
        for stat in STATS:
            whole = [r[stat] for r in mine if r[stat] is not None]
            print(f"{fam}: {len(mine)} runs; {stat} highest over a run "
                  f"{max(whole, default=None)}"
                  + "".join(f", {w}-step windows " + str(max(
                      (r['online'][w][stat] for r in mine if r['online'][w][stat]),
                      default=None)) for w in WINDOW_STEPS))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    if a.floor:
        merge(Path(a.floor), rows, tuple(a.floor_stats))
        print(f"merged {', '.join(a.floor_stats)} into {a.floor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
