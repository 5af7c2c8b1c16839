"""`stragglerlab report`: the paper-vs-testbed report from a figures folder and detector scores.

    stragglerlab report --figures results/figures --scores results/scores.json \
        --runs results/*/* --out results/report

Writes `report.md` (GitHub markdown, images linked relative to it) and a
self-contained `report.html` (images embedded, inline CSS) into `--out`. A
missing or unreadable scores file gives a "not scored" line, not an error;
a missing figures folder or run folder is bad input (exit 2).
"""

from __future__ import annotations

from pathlib import Path


def add_parser(sub, name: str) -> None:
    """Register the verb's flags."""
    p = sub.add_parser(name, help="write the paper-vs-testbed report (markdown + HTML)")
    p.add_argument("--figures", required=True, metavar="DIR",
                   help="figures folder written by `stragglerlab figures`")
    p.add_argument("--scores", metavar="FILE",
                   help="scores JSON written by `stragglerlab score` (optional)")
    p.add_argument("--runs", nargs="*", default=[], metavar="DIR",
                   help="run folders, for the report's provenance (runs, seeds, versions)")
    p.add_argument("--out", required=True, help="output folder")


def run(args) -> int:
    """Write the report and print where it went."""
    from stragglerlab.figures.report import write_report

    md, page = write_report(Path(args.figures), args.scores, args.runs, Path(args.out))
    print(f"report: {md}\nreport: {page}")
    return 0
