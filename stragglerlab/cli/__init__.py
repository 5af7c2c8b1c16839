"""The one command line: `stragglerlab <verb>`.

Every verb uses the same flags with the same meaning: `--trace` (a trace
parquet), `--meta` (its job-meta YAML), `--out` (the only place outputs go),
`--config` and `--scenario`. Bad input prints one clear message and exits 2.

    stragglerlab whatif --trace trace.parquet --meta meta.yaml --out results/job1
"""

from __future__ import annotations

import argparse
import sys

from stragglerlab.cli import detect as detect_cmd
from stragglerlab.cli import figures as figures_cmd
from stragglerlab.cli import report as report_cmd
from stragglerlab.cli import score as score_cmd
from stragglerlab.cli import train as train_cmd
from stragglerlab.cli import whatif as whatif_cmd
from stragglerlab.errors import InputError

EXIT_BAD_INPUT = 2

VERBS = {"whatif": whatif_cmd, "train": train_cmd, "detect": detect_cmd, "score": score_cmd,
         "figures": figures_cmd, "report": report_cmd}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per verb."""
    parser = argparse.ArgumentParser(
        prog="stragglerlab",
        description="Straggler testbed and what-if analysis (OSDI'25 method).",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, module in VERBS.items():
        module.add_parser(sub, name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `stragglerlab` console script."""
    args = build_parser().parse_args(argv)
    try:
        return VERBS[args.verb].run(args) or 0
    except InputError as e:
        print(f"stragglerlab {args.verb}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"stragglerlab {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
