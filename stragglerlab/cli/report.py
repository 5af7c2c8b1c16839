"""`stragglerlab report`: the paper-vs-testbed report from a figures folder and detector scores.

    stragglerlab report --figures results/figures --scores results/scores.json \
        --runs results/*/* --out results

Writes `report.md` (GitHub markdown, images linked relative to it) and a
self-contained `report.html` (images embedded, inline CSS) into `--out`
(required) and prints their paths to stdout (with --quiet too). A
missing scores file gives a "not scored" line, not an error (a malformed one is);
a missing figures folder or run folder is bad input (exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.cli.common import (
    examples,
    inputs_not_overwritten,
    out_folder,
    run_inputs,
)
from stragglerlab.util.filecheck import distinct_runs
from stragglerlab.util.folder_lock import lock_folder

OUTPUTS = ("report.md", "report.html")
"""The files the verb writes into --out."""


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="write the paper-vs-testbed report (markdown + HTML)",
                       epilog=examples(
                           "stragglerlab report --figures results/figures --scores "
                           "results/scores.json --runs results/*/* --out results"))
    p.add_argument("--figures", required=True, metavar="DIR",
                   help="figures folder written by `stragglerlab figures`")
    p.add_argument("--scores", metavar="FILE",
                   help="scores JSON written by `stragglerlab score` (optional)")
    p.add_argument("--runs", nargs="*", default=[], metavar="DIR",
                   help="run folders, for the report's provenance (runs, seeds, versions)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (required); writes report.md and report.html")
    return p


def run(args) -> int:
    """Write the report and print where it went."""
    from stragglerlab.figures.report import write_report
    from stragglerlab.util.atomic import staged_folder

    out = out_folder(args.out)
    lock_folder(out, "report")  # one writer of the folder at a time
    distinct_runs(args.runs)  # provenance would count a run twice ("3 run folders")
    inputs_not_overwritten(run_inputs([args.figures], ["*.json", "*.png"], "--figures")
                           + [("--scores", args.scores)] + run_inputs(args.runs), out, OUTPUTS)
    # Both files or neither; links are relative to a sibling.
    with staged_folder(out, owns=OUTPUTS) as tmp:
        md, page = write_report(Path(args.figures), args.scores, args.runs, tmp)
    md, page = out / md.name, out / page.name
    print(f"report: {md}\nreport: {page}")  # the result: stdout, --quiet or not
    return 0
