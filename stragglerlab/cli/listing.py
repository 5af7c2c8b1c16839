"""`stragglerlab list`: what the testbed has, by name: scenarios, detectors, figures, faults.

    stragglerlab list scenarios [--config FILE]
    stragglerlab list detectors        # built-ins and plug-ins (entry points)
    stragglerlab list figures
    stragglerlab list faults
"""

from __future__ import annotations

import argparse

from stragglerlab.cli.common import examples
from stragglerlab.util.errors import InputError

WHAT = ("scenarios", "detectors", "figures", "faults")


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="list scenarios, detectors, figures or fault kinds",
                       epilog=examples("stragglerlab list detectors",
                                       "stragglerlab list scenarios --config my-scenarios.yaml"))
    p.add_argument("what", choices=WHAT, help="what to list")
    p.add_argument("--config", metavar="FILE",
                   help="with scenarios: YAML merged over the built-in scenarios")
    return p


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def rows(what: str, config: str | None = None) -> list[tuple[str, str]]:
    """(name, one-line description) for each item of `what`."""
    if what == "scenarios":
        from stragglerlab.scenarios.scenario import list_scenarios

        out = []
        for sc in list_scenarios(config):
            if config is not None:  # a user's file: its faults checked as train checks them
                from stragglerlab.injectors.registry import check_scenario_faults

                check_scenario_faults(sc, config)
            par = sc.parallel
            kinds = ", ".join(str(f.get("kind")) for f in sc.faults) or "clean"
            out.append((sc.name, f"dp={par.dp} pp={par.pp}, {sc.run.steps} steps; {kinds}"))
        return out
    if what == "detectors":
        from stragglerlab.analysis.detectors import detector_names, get_detector

        return [(n, get_detector(n).description) for n in detector_names()]
    if what == "figures":
        from stragglerlab.figures.registry import figure_names, find_module

        return [(n, find_module(n).TITLE) for n in figure_names()]
    from stragglerlab.injectors.registry import injector_classes

    return [(kind.value, _first_line(cls.__doc__)) for kind, cls in injector_classes().items()]


def run(args) -> int:
    """Print one line per item: name, then what it is."""
    if args.config is not None and args.what != "scenarios":
        raise InputError(f"--config is a scenario file, read by `list scenarios` only; "
                         f"`list {args.what}` lists what is installed (plug-ins included)",
                         "--config")
    items = rows(args.what, args.config)
    width = max((len(n) for n, _ in items), default=0)
    for name, text in items:
        print(f"{name:{width}s}  {text}")
    return 0
