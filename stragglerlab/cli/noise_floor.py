"""`stragglerlab noise-floor`: measure the noise floor of clean runs (per layout family).

    stragglerlab noise-floor --runs results/clean-*/* --out results/noise
    stragglerlab detect --run R --detector whatif \
        --noise-floor results/noise/noise-floor.yaml --out R/detect

Each run must be clean (its faults.json is `[]`) and analysed (`stragglerlab whatif`
first). For every threshold of the `whatif` detector it reads how high the threshold's
statistic goes on each run with that threshold taken away
(stragglerlab/analysis/detectors/whatif_noise.py), and writes `noise-floor.yaml` into
--out: per layout family the highest reading of each statistic, and the spread of the
runs' S and simulation discrepancy (--out is required: the floor is of several
runs). Progress with ETA goes to stderr, the floor per family to stdout (with
--quiet too). The shipped floor (config/noise-floor.yaml) was
written this way from the testbed's clean runs; measure your own on your host.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.cli.common import (
    examples,
    inputs_not_overwritten,
    out_file,
    run_inputs,
)
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import distinct_runs
from stragglerlab.util.folder_lock import lock_folder

ASSUMED_CLEAN = "a run with faults: the noise floor is measured on clean runs only"


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="measure the detector's noise floor on clean runs",
                       description=__doc__, epilog=examples(
                           "stragglerlab noise-floor --runs results/clean-*/* --out results/noise"))
    p.add_argument("--runs", nargs="+", required=True, metavar="DIR",
                   help="clean, analysed run folders (faults.json [] and whatif/whatif.json)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (required); writes noise-floor.yaml")
    return p


def run(args) -> int:
    """Read every run, measure, write."""
    from stragglerlab.analysis.detectors import load_run
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector
    from stragglerlab.analysis.detectors.whatif_noise import WINDOW_STEPS, measure_floor
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.method.noise_floor import NOISE_FLOOR_YAML, write_noise_floor
    from stragglerlab.run.results import STRAGGLING_S
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.trace.meta import LayoutFamily

    path = out_file(args.out, NOISE_FLOOR_YAML)  # checked before any work starts
    lock_folder(path.parent, "noise-floor")  # one writer of the folder at a time
    distinct_runs(args.runs)  # a run twice would be counted twice in the floor's n_runs
    inputs_not_overwritten(run_inputs(args.runs), path.parent, [path.name])

    detector = WhatIfDetector(noise_floor=None)
    readings: dict = {}
    with Reporter(quiet=args.quiet) as progress:
        task = progress.task("clean runs", total=len(args.runs))
        for run_dir in args.runs:
            folder = RunFolder(path=Path(run_dir))
            if folder.faults_path.is_file() and folder.faults:
                raise InputError(f"{ASSUMED_CLEAN}; drop it from --runs",
                                 str(folder.faults_path))
            run = load_run(run_dir)
            reading = detector.clean_reading(run)
            if reading.job_slowdown >= STRAGGLING_S:  # a floor of it would hide stragglers
                raise InputError(
                    f"this run is straggling (S {reading.job_slowdown:.3f} >= "
                    f"{STRAGGLING_S}), and the noise floor is measured on clean runs only"
                    + ("" if folder.faults_path.is_file() else
                       " (it has no faults.json, so it was taken as clean)")
                    + "; drop it from --runs", str(folder.path))
            family = LayoutFamily.of(run.meta.dp_size, run.meta.pp_size)
            readings.setdefault(family, []).append(reading)
            task.advance(note=f"{run_dir} ({reading.layout}): S {reading.job_slowdown:.3f}")
    floor = measure_floor(readings)
    write_noise_floor(path, floor, header=(
        "Noise floor of the whatif detector, measured by `stragglerlab noise-floor` on "
        f"{len(args.runs)} clean runs.\nPer layout family: the highest value each threshold's "
        "statistic reached with that threshold taken away\n(analysis/detectors/"
        "whatif_noise.py), over the whole run and (`online`) over every sliding window of "
        f"{', '.join(map(str, WINDOW_STEPS[:-1]))} and {WINDOW_STEPS[-1]} steps\nthat an "
        "online replay or the monitor diagnoses, and the spread "
        "of the runs' S and simulation discrepancy."))
    for family, ff in floor.families.items():
        stats = ", ".join(f"{k} {v:.4g}" for k, v in sorted(ff.statistics.items())) or "none"
        s = ff.job_slowdown
        layouts = ", ".join(f"{lay} x{ff.runs_by_layout[lay]}" for lay in ff.layouts)
        print(f"{family.value:6s} {ff.n_runs} runs ({layouts}): S "
              f"{s.min:.3f}-{s.max:.3f}; statistics: {stats}")
    print(f"wrote {path}")
    return 0
