"""`stragglerlab plot`: the pictures of one analysed job: worker heatmap and per-step slowdown.

    stragglerlab plot --run results/slow-worker-1/0          # -> results/slow-worker-1/0/plot/
    stragglerlab plot --trace trace-ST.parquet --meta meta-ST.yaml --out plots/ST
    stragglerlab plot --whatif results/reference/ST/whatif.json --out plots/ST

Any analysed job: a run folder of `stragglerlab train`, the output folder of
`stragglerlab import kineto` or of `stragglerlab synth` (each holds
trace.parquet and meta.yaml), or a trace parquet with its meta (e.g. the
artifact's trace-ST.parquet and meta-ST.yaml). What is drawn is the what-if
result of `--whatif FILE`, else the run folder's `whatif/whatif.json`, else
of the trace analysed here (only the pictures are written; `stragglerlab
whatif` writes whatif.json for every reader). Writes into --out (default
RUN/plot with --run) `heatmap.png` (min(S_dp, S_stage) per worker, PP rank x
DP rank, the Fig. 14 colours) and `step-slowdown.png` (step times and S per
step), each with its `.pdf` and a `.json` of the numbers drawn (schema
stragglerlab.plot/1), and prints their paths to stdout (with --quiet too);
progress goes to stderr. A rerun removes those of these names it did not
write again (OUTPUTS). The drawing is figures/job_pictures.py, as the Python
API's `Job.heatmap()` and `Job.step_plot()`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.cli.common import (
    defaulted_run,
    examples,
    inputs_not_overwritten,
    out_folder,
    run_inputs,
    run_out,
)
from stragglerlab.run.run_folder import PLOT_DIR
from stragglerlab.util.errors import InputError
from stragglerlab.util.folder_lock import lock_folder

OUTPUTS = tuple(f"{name}.{ext}" for name in ("heatmap", "step-slowdown")
                for ext in ("png", "pdf", "json"))
"""Every file the verb writes into --out (figures/job_pictures.py PICTURES): a rerun
removes those of an earlier run it did not write again."""


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(
        name, help="draw one analysed job: worker heatmap and per-step slowdown",
        epilog=examples(
            "stragglerlab plot --run examples/slow-worker   # -> examples/slow-worker/plot/",
            "stragglerlab plot --trace tests/data/reference-traces/trace-ST.parquet "
            "--meta tests/data/reference-traces/meta-ST.yaml --out /tmp/plot-ST",
            "stragglerlab plot --whatif results/job1/whatif.json --out /tmp/plot-job1"))
    src = p.add_mutually_exclusive_group()
    src.add_argument("--run", metavar="DIR",
                     help="analysed folder: a run folder, or an `import kineto` or `synth` "
                          "output (trace.parquet, meta.yaml; whatif/whatif.json is used when "
                          "there)")
    src.add_argument("--trace", metavar="FILE", help="trace parquet file, analysed here")
    p.add_argument("--meta", metavar="FILE",
                   help="job meta YAML (default: the folder's meta.yaml, else the meta in the "
                        "parquet)")
    p.add_argument("--whatif", metavar="FILE",
                   help="draw this whatif.json (written by `stragglerlab whatif`) instead of "
                        "analysing; default with --run: DIR/whatif/whatif.json when it exists")
    p.add_argument("--out", metavar="DIR",
                   help="output folder; writes heatmap.{png,pdf,json} and "
                        "step-slowdown.{png,pdf,json} (default: RUN/plot with --run; required "
                        "otherwise)")
    p.add_argument("--compute-ideal", choices=["mean", "median"],
                   help="compute ideal of the numbers drawn: mean (the paper's) or median "
                        "(default: the whatif.json's own; mean when analysing a trace)")
    return p


def run(args) -> int:
    """Find or compute the job's what-if result, draw both pictures, print their paths."""
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.figures.job_pictures import write_job_pictures
    from stragglerlab.util.atomic import staged_folder

    if not (args.run or args.trace or args.whatif):
        raise InputError("plot needs the job to draw: --run DIR (an analysed folder), "
                         "--trace FILE [--meta FILE] or --whatif FILE")
    if (args.run and args.whatif and args.out is None
            and not Path(args.whatif).resolve().is_relative_to(Path(args.run).resolve())):
        # RUN/plot would show another job under RUN's name, replacing RUN's own pictures.
        raise InputError(f"--whatif {args.whatif} is not of --run {args.run}, whose plot/ "
                         "folder the pictures would go to; pass --out DIR for it, or leave "
                         "--whatif out to draw the run's own what-if")
    out_arg = run_out(args.out, args.run, PLOT_DIR)
    if not out_arg:
        raise InputError("plot --trace / --whatif needs --out DIR (the output folder)")
    out = out_folder(out_arg, default_of=defaulted_run(args.out, args.run))
    lock_folder(out, "plot")  # one writer of the folder at a time
    # e.g. --whatif DIR/heatmap.json --out DIR: the picture's numbers would replace it.
    inputs_not_overwritten(
        [("--whatif", args.whatif), ("--trace", args.trace), ("--meta", args.meta)]
        + run_inputs([args.run] if args.run else [],
                     ["whatif/whatif.json", "whatif.json", "trace.parquet", "meta.yaml"],
                     "--run"), out, OUTPUTS)
    with Reporter(quiet=args.quiet) as progress:
        result, name, source = _what_if(args, progress)
        progress(f"drawing heatmap and step slowdown of {name} -> {out}/")
        with staged_folder(out, owns=OUTPUTS) as tmp:  # every picture or none
            written = write_job_pictures(result, tmp, title=name, source=source)
    print("\n".join(str(out / p.name) for p in written))  # the result: stdout, --quiet or not
    return 0


def _what_if(args, progress):
    """(what-if result to draw, a WhatIfSummary; job name; data source) from --whatif, --run
    or --trace."""
    from stragglerlab.run.general_record import is_general_import
    from stragglerlab.run.whatif_reader import read_whatif_summary

    whatif = Path(args.whatif) if args.whatif else None
    trace = Path(args.trace) if args.trace else None
    meta = args.meta
    if args.run:
        run_dir = Path(args.run)
        if not run_dir.is_dir():
            raise InputError("no such folder; --run names an analysed folder (trace.parquet "
                             "and meta.yaml, e.g. a run, import kineto or synth output)",
                             str(run_dir))
        from stragglerlab.run.run_folder import RunFolder

        folder = RunFolder(path=run_dir)  # has_*: a folder or a pipe in a file's place is named
        if is_general_import(run_dir):  # an unannotated import: its own what-if, drawn as is
            whatif = whatif or run_dir / "whatif.json"
        elif whatif is None and folder.has_whatif:
            whatif = folder.whatif_path
        trace = folder.trace_path
        if meta is None and folder.has_meta:
            meta = str(folder.meta_path)
        if whatif is None and not trace.is_file():
            raise InputError("the folder has neither whatif/whatif.json nor trace.parquet; "
                             "pass an analysed folder (a run, import kineto or synth output) "
                             "or --trace FILE", str(run_dir))
    if whatif is not None:
        summary = read_whatif_summary(whatif, args.compute_ideal)
        progress(f"read the what-if result {whatif} ({summary.model.value} model)")
        fallback = Path(args.run).name if args.run else whatif.parent.name
        return summary, summary.job_name or fallback, f"what-if result {whatif}"
    return _analyse(trace, meta, args, progress)


def _analyse(trace: Path, meta: str | None, args, progress):
    from stragglerlab.analysis.whatif import ComputeIdeal, analyze
    from stragglerlab.trace.trace_io import read_trace

    df, job_meta = read_trace(trace, meta)
    progress(f"read {len(df):,} ops from {trace}"
             + ("" if args.whatif or not args.run else
                f" (no whatif/whatif.json there: analysing; `stragglerlab whatif --run "
                f"{args.run}` writes it once for every reader)"))
    stages = progress.task("what-if")
    result = analyze(df, job_meta, where=str(trace), progress=stages,
                     compute_ideal=ComputeIdeal(args.compute_ideal or "mean"))
    name = job_meta.trial_name or (Path(args.run).name if args.run else trace.stem)
    return result.summary(), name, f"what-if of {trace}"
