"""`stragglerlab score`: score detectors against the runs' ground truth (faults.json).

    stragglerlab score --runs results/*/* --detector all --out results
    stragglerlab score --runs results/*/* --detector whatif rank-score --out results

For each run and detector it reads `<run>/detect/<name>.json` (offline) and
`<run>/detect/<name>-online.json` (online), as `stragglerlab detect` (or the
workflow's detect rule) wrote them; it never runs a detector itself, so a
missing findings file is an error naming the `detect` command to run
(`--offline-only`: online files are used where present, else skipped).
Prints the leaderboard (detector x metric, each with its 95% bootstrap
interval over cases), a per kind x layout family table and a per-fault-kind
table to stdout (with --quiet too), progress with ETA to stderr; writes
`scores.json` into --out (required): `schema` ("stragglerlab.scores/1") and
one entry per detector name, each with precision, recall, f1,
root_cause_accuracy, median_latency_steps, slowdown_error, per-fault scores
(fault_recall, fault_cause_accuracy, ...), `ci` (intervals), confusion,
by_kind, by_family, by_kind_family and per-run rows (analysis/suite_score.py says
how each is counted). On the `test` split (`snakemake --configfile
config/test.yaml`) this is the benchmark's headline.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.cli.common import (
    RUN_INPUTS,
    examples,
    finish_killed,
    inputs_not_overwritten,
    out_file,
    run_inputs,
)
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import distinct_runs
from stragglerlab.util.folder_lock import lock_folder

SCORES_NAME = "scores.json"
"""The file `score` writes inside its --out folder."""

METRICS = ("precision", "recall", "f1", "root_cause_accuracy", "median_latency_steps",
           "slowdown_error")


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="score detectors against ground truth over run folders",
                       epilog=examples(
                           "stragglerlab score --runs results/*/* --detector all --out results",
                           "stragglerlab score --runs results/*/* --detector whatif rank-score "
                           "--offline-only --out /tmp/scores"))
    p.add_argument("--runs", nargs="+", required=True, metavar="DIR",
                   help="run folders, each with detect/<detector>.json (`stragglerlab detect`)")
    p.add_argument("--detector", nargs="+", default=["all"], metavar="NAME",
                   help="detector name(s), or `all` (every registered detector)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (required: the scores are of several runs); writes "
                        "scores.json")
    p.add_argument("--offline-only", action="store_true",
                   help="skip online replays that are not already on disk (no latency)")
    return p


def _findings(truth, name: str, online: bool, required: bool):
    """A run's findings of one detector as `detect` wrote them; None when absent and not
    required. Scoring never runs a detector: a required file that is missing is an error."""
    from stragglerlab.run.run_folder import RunFolder  # pandas: only when scoring

    run_dir = truth.run
    folder = RunFolder(path=Path(run_dir))
    if folder.has_findings(name, online):
        doc = folder.findings_document(name, online)  # validated against the run's layout
        _of_this_run(doc, truth, folder.findings_path(name, online))
        return doc.findings
    if not required:
        return None
    flag = " --online" if online else ""
    skip = " (or score without latency: --offline-only)" if online else ""
    raise InputError(
        f"no {folder.findings_path(name, online).name} findings of detector {name!r}; "
        f"score reads what `stragglerlab detect` wrote and never runs detectors: run "
        f"`stragglerlab detect --run {run_dir} --detector {name}{flag} "
        f"--out {folder.detect_dir}` first{skip}", str(folder.detect_dir))


def _of_this_run(doc, truth, path: Path) -> None:
    """Refuse a findings file that is about another run: its `run` names another existing
    run folder, or a finding's steps lie outside this run's traced steps. (A moved run
    folder keeps a stale `run` that no longer exists: that is not refused.)"""
    fix = (f"was it copied from another run? rerun `stragglerlab detect --run {truth.run} "
           f"--detector {doc.detector}` to rewrite it")
    named = Path(doc.run) if doc.run else None
    if (named is not None and (named / "meta.yaml").is_file()
            and named.resolve() != Path(truth.run).resolve()):
        raise InputError(f"the findings file says it is of run {doc.run}, not of this run "
                         f"{truth.run}; {fix}", str(path))
    if truth.traced_steps is None:
        return
    lo, hi = truth.traced_steps
    hi += 1  # the step under way when a crashed or hung run's trace ended
    for i, f in enumerate(doc.findings):
        if f.last_step < lo or f.last_step > hi:
            raise InputError(f"findings[{i}] covers steps {f.first_step}-{f.last_step}, "
                             f"outside the run's steps {lo}-{hi} (traced, and the one after "
                             f"them a failure may name); a finding lies within the steps it "
                             f"was found in ({fix})", str(path))


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _cell(m: dict, metric: str) -> str:
    """`value [lo, hi]` (the bootstrap interval over cases beside the score)."""
    ci = (m.get("ci") or {}).get(metric)
    value = _fmt(m.get(metric))
    return value if not ci else f"{value} [{ci[0]:.2f},{ci[1]:.2f}]"


LEADERBOARD = ("f1", "precision", "recall", "root_cause_accuracy", "fault_recall",
               "fault_cause_accuracy", "fault_median_latency_steps", "fault_slowdown_error")
"""Columns of the leaderboard (each with its 95% bootstrap interval over cases)."""
CELL = 22
"""Narrowest leaderboard column; a longer metric name widens its own, never truncated (the
`_steps` of fault_median_latency_steps is its unit)."""


def table(scores: dict) -> str:
    """The leaderboard: detector x metric with intervals, then per kind x layout family
    F1 / root-cause accuracy (with the F1 interval), then the legacy per-kind table."""
    ranked = sorted(scores.items(), key=lambda kv: -(kv[1].get("f1") or 0.0))
    width = {m: max(CELL, len(m)) for m in LEADERBOARD}
    lines = ["leaderboard (95% bootstrap interval over cases in brackets)",
             f"{'detector':18s} " + " ".join(f"{m:>{width[m]}s}" for m in LEADERBOARD)
             + "  runs"]
    for name, s in ranked:
        lines.append(f"{name:18s} "
                     + " ".join(f"{_cell(s, m):>{width[m]}s}" for m in LEADERBOARD)
                     + f"  {s['n_runs']}")
    cells = sorted({k for s in scores.values() for k in s.get("by_kind_family", {})})
    if cells:
        lines += ["", "per kind x layout family: F1 [interval] / root-cause accuracy (runs)"]
        for cell in cells:
            row = [f"{cell:28s}"]
            for name, s in ranked:
                m = s.get("by_kind_family", {}).get(cell)
                row.append("-" if m is None else
                           f"{name}={_cell(m, 'f1')}/{_fmt(m['root_cause_accuracy'])}"
                           f"({m['n_runs']})")
            lines.append("  ".join(row))
    kinds = sorted({k for s in scores.values() for k in s["by_kind"]})
    lines += ["", "per fault kind: F1 / root-cause accuracy / median latency (steps)",
              f"{'detector':18s} " + " ".join(f"{k[:16]:>16s}" for k in kinds)]
    for name, s in ranked:
        row = []
        for k in kinds:
            m = s["by_kind"].get(k)
            row.append("-" if m is None else
                       f"{_fmt(m['f1'])}/{_fmt(m['root_cause_accuracy'])}/"
                       f"{_fmt(m['median_latency_steps'])}")
        lines.append(f"{name:18s} " + " ".join(f"{c:>16s}" for c in row))
    return "\n".join(lines + [""] + noise_table(ranked))


def _bin(row: dict) -> str:
    if row["lo"] is None:
        return "unmeasured"
    return f"<{row['hi']}" if row["lo"] == 1.0 else \
        f">={row['lo']}" if row["hi"] is None else f"{row['lo']}-{row['hi']}"


def noise_table(ranked: list[tuple[str, dict]]) -> list[str]:
    """Per detector: false findings per 1,000 clean worker-steps, faults scored apart as
    unobservable, recall by the faults' measured slowdown (the sensitivity curve), and
    fault recall without the faults measured under their family's noise floor."""
    if not ranked:
        return []
    bins = [_bin(r) for r in ranked[0][1]["sensitivity"]]
    lines = ["noise and sensitivity: false findings per 1,000 clean worker-steps (clean runs "
             "with findings / clean runs), unobservable faults apart, fault recall by "
             "measured slowdown (faults)",
             f"{'detector':18s} {'false/1k':>9s} {'clean':>7s} {'apart':>6s} "
             + " ".join(f"{b:>12s}" for b in bins) + "  recall over floor (faults under)"]
    for name, s in ranked:
        cells = [f"{_fmt(r['recall'])}({r['n']})" if r["n"] else "-" for r in s["sensitivity"]]
        lines.append(f"{name:18s} {_fmt(s['false_findings_per_1k_clean_worker_steps']):>9s} "
                     f"{s['clean_runs_with_findings']}/{s['clean_runs']:<5d} "
                     f"{s['unobservable_faults']:>6d} " + " ".join(f"{c:>12s}" for c in cells)
                     + f"  {_cell(s, 'fault_recall_over_floor')} "
                       f"({s.get('faults_below_floor', 0)})")
    rows = ranked[0][1]["sensitivity"]
    return lines + unmeasured_lines((rows[-1].get("why") if rows else None) or {})


def unmeasured_lines(why: dict[str, int]) -> list[str]:
    """Why faults sit in the `unmeasured` column, and what would measure them."""
    from stragglerlab.analysis.fault_control import Unmeasured

    lines = []
    for reason, n in sorted(why.items(), key=lambda kv: -kv[1]):
        try:
            known = Unmeasured(reason)
        except ValueError:
            lines.append(f"  unmeasured: {n} fault(s), {reason}")
            continue
        lines.append(f"  unmeasured: {n} fault(s), {known.value}: {known.advice}")
    return lines


def run(args) -> int:
    """Score every requested detector over the runs."""
    from stragglerlab.analysis.detectors import TraceNeed, detector_names, get_detector
    from stragglerlab.analysis.ground_truth import load_truths
    from stragglerlab.analysis.suite_score import score_suite
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.figures.scores import SCORES_SCHEMA
    from stragglerlab.run.general_record import is_general_import

    out = out_file(args.out, SCORES_NAME)
    # one writer of the scores file at a time: other scores may share the folder
    lock_folder(out.parent, "score", name=f".{out.name}.lock")
    names = detector_names() if "all" in args.detector else list(dict.fromkeys(args.detector))
    for name in names:
        if name not in detector_names():
            raise InputError(f"unknown detector {name!r}; available: "
                             f"{', '.join(detector_names())}")
    for r in args.runs:
        if not Path(r).is_dir():
            raise InputError(f"{r}: not a run folder")
    finish_killed(args.runs, args.quiet)
    distinct_runs(args.runs)  # a run twice would count twice in every score and interval
    inputs_not_overwritten(run_inputs(args.runs, (*RUN_INPUTS, "detect/*.json")), out.parent,
                           [out.name])
    scores = {}
    with Reporter(quiet=args.quiet) as progress:
        progress(f"reading the ground truth of {len(args.runs)} runs")
        truths = load_truths(args.runs)
        scored = [t for t in truths if t.scored]
        progress(f"{len(scored)} runs scored, {len(truths) - len(scored)} skipped "
                 "(mitigation runs)")
        task = progress.task("score", total=len(names) * (len(scored) + 1))
        imports = {t.run for t in scored if is_general_import(t.run)}
        for name in names:
            needs = get_detector(name).needs
            # an unannotated import has no op names; the import's what-if is of the whole run
            apart = imports if needs is TraceNeed.OP_VOCABULARY else set()
            whole = imports if needs is TraceNeed.WHATIF else set()
            runs = [t for t in scored if t.run not in apart]
            if not runs:
                progress(f"{name}: not scored (it compares ops by their names in the op "
                         "vocabulary; every run is an unannotated import)")
                task.advance(len(scored) + 1, note=name)
                continue
            offline, online = {}, {}
            for t in runs:
                offline[t.run] = _findings(t, name, False, required=True)
                found = _findings(t, name, True,
                                  required=not args.offline_only and t.run not in whole)
                if found is not None:
                    online[t.run] = found
                task.advance(note=f"{name}: {t.run}")
            task.advance(len(scored) - len(runs), note=name)
            suite = score_suite(runs, offline, online if online else None)
            scores[name] = suite.to_json()
            scores[name]["skipped_runs"] = [t.run for t in truths if not t.scored]
            scores[name]["not_applicable_runs"] = sorted(apart)
            task.advance(note=name)
            progress(f"scored {name}: F1 {_fmt(scores[name]['f1'])}, "
                     f"root cause {_fmt(scores[name]['root_cause_accuracy'])}")
    atomic_write_json(out, {"schema": SCORES_SCHEMA, **scores})
    print(table(scores))  # the result: stdout, --quiet or not
    return 0
