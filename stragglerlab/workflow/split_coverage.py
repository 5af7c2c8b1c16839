"""Coverage and run-time estimate of the detector benchmark's splits (`splits.py`).

`coverage_table` counts a split's cases per fault kind and layout family;
`estimate_seconds` is a rough wall time of one case on 2 cores, from the
constants below (each says where it was measured). The workflow's split
tests and the README read both; the printout is for the README:

    .venv/bin/python -m stragglerlab.workflow.split_coverage [config/workflow.yaml]
"""

from __future__ import annotations

import sys
from pathlib import Path

from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.trace.meta import LayoutFamily
from stragglerlab.workflow.population import FAILING_KINDS
from stragglerlab.workflow.splits import Case, all_cases, failing_timeout_s

STARTUP_S = (1.6, 2.55)
"""Run start-up, s = a + b * ranks (Ray, actors, isolation, warm-up step): fitted on two
short runs on a 2-core machine shared with other jobs: dp2-pp1
(7.1 s, 6 steps of ~70 ms) and dp4-pp4 (47.8 s, 6 steps of ~0.9 s)."""

STEP_UNIT_S = 0.028
"""Step time, s, per unit of dp * n_layers * microbatches / 4 (clean base): dp4-pp4
(32 units) 0.9 s -> 28 ms; dp2-pp1 (4 units) 70 ms -> 17.5 ms; dp2-pp2 (8 units)
260 ms -> 32 ms (benchmarks/README.md). The seq-imbalance base (long packed
sequences): 37 ms per unit (its benchmark row: 294 ms at dp4-pp1, 2 layers)."""

ANALYSIS_S = 20.0
"""whatif + every detector offline and online per run, s of wall time on 2 cores
(about 16 CLI jobs of ~2.5 s, two at a time; benchmarks/README.md detector costs)."""


def estimate_seconds(case: Case) -> float:
    """Rough wall time of one case on 2 cores: start-up + steps x step time (slowed by its
    faults, conservatively: the whole job at the victim's factor) + failure timeout +
    analysis. Constants above say where each number comes from."""
    e = case.entry
    units = case.dp * e["model"]["n_layers"] * e["parallel"]["microbatches"] / 4
    seq = any(f["kind"] == FaultKind.SEQ_IMBALANCE.value for f in e.get("faults") or [])
    step = units * (0.037 if seq else STEP_UNIT_S)
    total = STARTUP_S[0] + STARTUP_S[1] * case.dp * case.pp + ANALYSIS_S
    steps = e["run"]["steps"]
    factor = 1.0
    for f in e.get("faults") or []:
        p, kind = f.get("params") or {}, FaultKind(f["kind"])
        if kind is FaultKind.SLOW_WORKER:
            factor *= p["factor"]
        elif kind is FaultKind.NET_THROTTLE:  # 50 Mbit/s: 935 vs 260 ms (benchmarks/README)
            factor *= max(1.0, 3.6 * 50.0 / p["rate_mbit"])
        elif kind is FaultKind.NET_DELAY:
            step += p["delay_ms"] / 1000 * (2 * e["parallel"]["microbatches"] + 3)
        elif kind is FaultKind.GC_PAUSES:
            step += 1.3 * p["pause_ms"] / 1000 / p["every_steps"]
        elif kind is FaultKind.STAGE_IMBALANCE:  # vocab 4096: 1.22x (benchmarks/README)
            factor *= 1.0 + 0.055 * p["vocab"] / 1024
        elif kind is FaultKind.SEQ_IMBALANCE:
            factor *= 1.3
        elif kind in FAILING_KINDS:
            total += failing_timeout_s(case.dp * case.pp) + 5.0
            steps = min(steps, int(f.get("first_step", steps)))
    return total + steps * step * factor



def coverage_table(cases: list[Case]) -> dict[str, dict[str, int]]:
    """Cases per fault kind (rows, `clean` included) and layout family (columns)."""
    table: dict[str, dict[str, int]] = {}
    for case in cases:
        for kind in case.kinds:
            row = table.setdefault(kind, {f.value: 0 for f in LayoutFamily})
            row[case.family.value] += 1
    return dict(sorted(table.items()))


def format_coverage(cases: list[Case]) -> str:
    """The coverage table as text, plus counts of multi-fault and windowed cases."""
    table = coverage_table(cases)
    fams = [f.value for f in LayoutFamily]
    lines = [f"{'kind':16s}" + "".join(f"{f:>9s}" for f in fams)]
    lines += [f"{k:16s}" + "".join(f"{row[f]:>9d}" for f in fams) for k, row in table.items()]
    multi = sum(len(c.entry.get("faults") or []) > 1 for c in cases)
    windows = sum(any(f.get("last_step") is not None for f in c.entry.get("faults") or [])
                  for c in cases)
    lines.append(f"{len(cases)} cases, {multi} with several faults, {windows} with a fault "
                 "that stops before the end; estimated "
                 f"{sum(map(estimate_seconds, cases)) / 60:.0f} min on 2 cores")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print both splits' coverage tables for a workflow config (default: config/workflow.yaml)."""
    import argparse

    import yaml

    from stragglerlab.scenarios.scenario import DEFAULT_CONFIG
    from stragglerlab.util.errors import InputError

    ap = argparse.ArgumentParser(prog="python -m stragglerlab.workflow.split_coverage",
                                 description=main.__doc__)
    ap.add_argument("config", nargs="?", type=Path,
                    default=DEFAULT_CONFIG.parent / "workflow.yaml",
                    help="a workflow config with a `splits` block (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        with open(args.config) as fh:
            cfg = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as e:
        print(f"{args.config}: cannot be read as YAML ({type(e).__name__}: "
              f"{str(e).splitlines()[0][:160]}); give a workflow config such as "
              "config/workflow.yaml", file=sys.stderr)
        return 2
    if not isinstance(cfg, dict):
        print(f"{args.config}: is not a workflow config (a mapping of keys)", file=sys.stderr)
        return 2
    try:
        splits = all_cases(cfg.get("splits"))
    except InputError as e:
        print(f"{args.config}: {e}", file=sys.stderr)
        return 2
    for split, cases in splits.items():
        print(f"== {split.value}\n{format_coverage(cases)}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
