"""`stragglerlab figures`: rebuild the paper's figures from run folders (and the reference traces).

    stragglerlab figures --runs results/*/* [--reference tests/data/reference-traces] \
        [--reference-whatif results/reference] [--scores results/scores.json] \
        [--only fig03_waste_cdf ...] --out results/figures

Each `--runs` entry is a run folder (`results/<scenario>/<seed>/`: the train
outputs plus `whatif/whatif.json`). Writes `<NAME>.png`, `<NAME>.pdf` and
`<NAME>.json` (schema, paper's number, ours, source, note) per figure into
`--out` (required), and removes files of the figures it built that an earlier
run wrote and this one did not (`<NAME>-*.png` of jobs gone); other figures'
files stay. Progress with ETA goes to stderr; the result, one line per figure,
to stdout (with --quiet too). Figures read the what-if results; none re-runs
the analysis. The reference traces' what-if results are read from
`--reference-whatif DIR`, as `DIR/<job>/whatif.json` (the workflow's
`results/reference/`; write one with `stragglerlab whatif --trace
REF/trace-AR.parquet --meta REF/meta-AR.yaml --out results/reference/AR`).
`--scores FILE` (what `stragglerlab score` wrote) feeds the confusion-matrix
figure `fig_confusion`; a bad scores file is bad input.
A figure without its data writes a "no data" image. Exit 2 on bad input
(missing run folder, unknown figure name); exit 1 if a figure failed to build
(the others are still written), and exit 1 with what is missing on stderr when
none of the figures had its data (--allow-empty: exit 0 all the same).
"""

from __future__ import annotations

import argparse
import sys
import traceback

from stragglerlab.cli import disk_error
from stragglerlab.cli.common import (
    RUN_INPUTS,
    examples,
    inputs_not_overwritten,
    out_folder,
    run_inputs,
)
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import distinct_runs
from stragglerlab.util.folder_lock import lock_folder, writing


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="rebuild the paper's figures from run folders",
                       epilog=examples(
                           "stragglerlab figures --runs results/*/* --scores results/scores.json "
                           "--out results/figures",
                           "stragglerlab figures --runs results/*/* --only fig03_waste_cdf "
                           "--out /tmp/figures"))
    p.add_argument("--runs", nargs="*", default=[], metavar="DIR",
                   help="run folders (results/<scenario>/<seed>/ with whatif/whatif.json)")
    p.add_argument("--reference", metavar="DIR",
                   help="the artifact's reference traces folder (trace-AR/ST, result-*.json; "
                        "the repository's tests/data/reference-traces)")
    p.add_argument("--reference-whatif", metavar="DIR",
                   help="what-if results of the reference traces, DIR/<job>/whatif.json "
                        "(e.g. results/reference/AR/whatif.json)")
    p.add_argument("--scores", metavar="FILE",
                   help="scores JSON written by `stragglerlab score` (for fig_confusion)")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="build only these figures (default: all; names as in the output files)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (required: figures are of several runs); writes "
                        "<NAME>.png, .pdf and .json per figure")
    p.add_argument("--allow-empty", action="store_true",
                   help="exit 0 even when none of the figures had its data (each still writes "
                        "its 'no data' image); the workflow, one figure per job, passes it")
    return p


def _summary(ours: dict, limit: int = 3) -> str:
    items = [(k, v) for k, v in ours.items() if not isinstance(v, str)][:limit]
    return ", ".join(f"{k}={v}" for k, v in items)


def owned(names: list[str]) -> list[str]:
    """The output patterns of the figures `names` (a figure may write `<NAME>-<job>.png`)."""
    return [f"{n}{tail}" for n in names for tail in (".png", ".pdf", ".json", "-*.png",
                                                      "-*.pdf")]


def run(args) -> int:
    """Load the runs once, build each figure, print one line per figure."""
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.figures.data import load_figure_data
    from stragglerlab.figures.registry import build_figure, figure_names, find_module
    from stragglerlab.util.atomic import staged_folder

    names = figure_names()
    if args.only:
        # Resolve early so a typo is one clear error before any work is done.
        names = list(dict.fromkeys(find_module(n).NAME for n in args.only))  # each once
    out = out_folder(args.out)
    # One writer of the folder at a time, for a run of every figure. The workflow builds
    # named figures side by side into one folder (--only NAME each, each its own files), so
    # those take no folder lock: its holder clears what killed writers left, which would
    # be a concurrent writer's staging.
    if not args.only:
        lock_folder(out, "figures")
    else:
        writing(out)
    distinct_runs(args.runs)  # one error here, as score and report give for the same list
    inputs_not_overwritten(
        run_inputs(args.runs, (*RUN_INPUTS, "gc/*.jsonl", "cpu/*.jsonl"))
        + run_inputs([args.reference] if args.reference else [], ["*"], "--reference")
        + run_inputs([args.reference_whatif] if args.reference_whatif else [],
                     ["*/whatif.json"], "--reference-whatif")
        + [("--scores", args.scores)], out, owned(names))
    data = load_figure_data(args.runs, args.reference,
                            reference_whatif_dir=args.reference_whatif, scores=args.scores)
    n_ok = len(data.ok_runs())
    failed, lines, built = [], [], []
    with Reporter(quiet=args.quiet) as progress:
        progress(f"figures: {len(data.runs)} runs ({n_ok} ok, {len(data.analysed_runs())} "
                 f"with what-if), {len(names)} figures -> {out}/")
        task = progress.task("figures", total=len(names))
        # Figures land in --out only when the loop ends; bad input found mid-way leaves
        # nothing. Stale files of the figures built are removed then, others' never.
        with staged_folder(out, owns=owned(names)) as tmp:
            for i, name in enumerate(names, 1):
                try:
                    result = build_figure(name, data, tmp)
                except InputError:
                    raise
                except Exception as e:  # one broken figure must not cost the others
                    if disk_error(e) is not None:
                        raise  # a full disk costs them all: the CLI's one error
                    failed.append(name)
                    lines.append(f"[{i}/{len(names)}] {name}: FAILED: {type(e).__name__}: {e}")
                    progress.error(traceback.format_exc().rstrip())
                else:
                    built.append(result)
                    what = result.note if not result.ours else _summary(result.ours)
                    lines.append(f"[{i}/{len(names)}] {name}: {result.source}; {what}")
                task.advance(note=name)
    print("\n".join(lines))  # the result: stdout, --quiet or not
    if failed:
        print(f"figures: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if built and not any(r.has_data for r in built) and not args.allow_empty:
        from stragglerlab.figures.data import nothing_to_draw

        print(f"figures: nothing to draw (only 'no data' images written): "
              f"{nothing_to_draw(data, built)} (--allow-empty: exit 0 all the same)",
              file=sys.stderr)
        return 1
    return 0
