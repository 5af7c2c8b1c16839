"""`stragglerlab detect`: run one straggler detector on one run folder.

    stragglerlab detect --run results/slow-worker-1/0 --detector whatif [--online]
    stragglerlab list detectors

Writes `<detector>.json` (offline) or `<detector>-online.json` into the --out
folder (default: RUN/detect): {"schema", "detector", "run", "online",
"findings": [...]}, each finding as analysis.detectors.base.Finding.to_dict
(ranks, first/last step, root cause, confidence, estimated slowdown, step
first reported at online). Prints the findings to stdout (with --quiet too).
"""

from __future__ import annotations

import argparse
import time

from stragglerlab.cli.common import (
    defaulted_run,
    examples,
    finish_killed,
    inputs_not_overwritten,
    not_another_record,
    out_file,
    run_inputs,
    run_out,
)
from stragglerlab.util.errors import InputError
from stragglerlab.util.folder_lock import lock_folder


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="run a straggler detector on a run folder (findings JSON)",
                       epilog=examples(
                           "stragglerlab detect --run examples/slow-worker --detector whatif   "
                           "# -> examples/slow-worker/detect/whatif.json",
                           "stragglerlab detect --run results/slow-worker-1/0 --detector "
                           "rank-score --online --out /tmp/detect"))
    p.add_argument("--run", required=True, metavar="DIR",
                   help="run folder (trace.parquet, meta.yaml, run.json)")
    p.add_argument("--detector", default="whatif", metavar="NAME",
                   help="detector name (see `stragglerlab list detectors`)")
    p.add_argument("--online", action="store_true",
                   help="replay the run step by step; findings carry the step they appeared at")
    p.add_argument("--out", metavar="DIR",
                   help="output folder; writes <detector>.json or <detector>-online.json "
                        "(default: RUN/detect)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="set one field of the detector's config (repeatable), e.g. --set "
                        "link_step_share=0.04; `stragglerlab list detectors` names them")
    p.add_argument("--noise-floor", default="default", metavar="FILE",
                   help="whatif: the measured noise floor its thresholds are raised to "
                        "(`stragglerlab noise-floor` writes one); `default`: the shipped "
                        "config/noise-floor.yaml, for this testbed's runs (with run.json) "
                        "only; `none`: no floor")
    return p


def settings(pairs: list[str]) -> dict[str, str]:
    """--set NAME=VALUE flags as a mapping (the detector parses each value)."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"--set {pair!r}: expected NAME=VALUE, e.g. --set "
                             "link_step_share=0.04")
        if name.strip() in out and out[name.strip()] != value.strip():
            raise InputError(f"--set {name.strip()} is given twice ({out[name.strip()]} and "
                             f"{value.strip()}); give each field once")
        out[name.strip()] = value.strip()
    return out


def findings_name(detector: str, online: bool) -> str:
    """The fixed file name of a detector's findings inside the --out folder."""
    return f"{detector}-online.json" if online else f"{detector}.json"


def run(args) -> int:
    """Detect and write the findings."""
    finish_killed(args.run, args.quiet)
    out = out_file(run_out(args.out, args.run, "detect"), findings_name(args.detector, args.online),
                   default_of=defaulted_run(args.out, args.run))
    # one writer of the findings file at a time: the workflow runs detectors side by side
    lock_folder(out.parent, "detect", name=f".{out.name}.lock")
    # e.g. --detector whatif --out RUN/whatif would write over the what-if it reads.
    floor = None if args.noise_floor in ("default", "none") else args.noise_floor
    inputs_not_overwritten(run_inputs([args.run], label="--run") + [("--noise-floor", floor)],
                           out.parent, [out.name])
    not_another_record(out, ("stragglerlab.findings/",), "a detector's findings")
    from stragglerlab.run.general_record import is_general_import

    if is_general_import(args.run):
        return _general(args, out)
    from stragglerlab.analysis.detectors import get_detector, load_run
    from stragglerlab.run.findings import FindingsDocument, write_findings

    detector = get_detector(args.detector, settings(args.set))
    if hasattr(detector, "use_noise_floor"):
        detector.use_noise_floor(args.noise_floor)
    run_data = load_run(args.run)
    t0 = time.perf_counter()
    findings = detector.detect_online(run_data) if args.online else detector.detect(run_data)
    report = getattr(detector, "noise_report", None)
    write_findings(out, FindingsDocument(detector=args.detector, run=str(args.run),
                                         online=args.online, findings=findings,
                                         noise_floor=report))
    # The result: stdout, --quiet or not.
    mode = "online" if args.online else "offline"
    print(f"{args.detector} ({mode}) on {args.run}: {len(findings)} finding(s) "
          f"in {time.perf_counter() - t0:.1f}s -> {out}")
    for f in findings:
        ranks = ", ".join(f"(DP {r.dp_rank}, PP {r.stage})" for r in f.ranks) or "whole job"
        est = f", est. slowdown {f.estimated_slowdown:.2f}" if f.estimated_slowdown else ""
        print(f"  {f.root_cause.value:18s} {ranks}  steps {f.first_step}-{f.last_step}  "
              f"confidence {f.confidence:.2f}{est}")
    if report:
        print("  " + floor_line(report))
    if line := _validity_line(args.run):
        print("  " + line)
    return 0


def _general(args, out) -> int:
    """`detect` on an unannotated import: every detector that needs only steps, ranks and
    span times (its `needs`), on the import's compute and communication spans
    (stragglerlab.trace.step_view); `whatif` names what the import's what-if names."""
    from stragglerlab.analysis.detectors import TraceNeed, get_detector, load_run
    from stragglerlab.run.findings import FindingsDocument, write_findings

    detector = get_detector(args.detector, settings(args.set))
    if detector.needs is TraceNeed.OP_VOCABULARY:
        raise InputError(f"the {args.detector} detector compares ops by their names in the "
                         "Megatron op vocabulary (forward-compute, grads-reduce-scatter, ...) "
                         "across ranks, which an unannotated import does not have; use "
                         "`--detector whatif` (the import's what-if) or one that needs only "
                         "step times ("
                         + ", ".join(d for d in _import_detectors() if d != "whatif")
                         + "), or annotate the job (docs/own-job.md) and import it again",
                         str(args.run))
    if args.online and detector.needs is TraceNeed.WHATIF:
        raise InputError("the import's what-if is of the whole trace, not replayed step by "
                         "step; drop --online, or use a detector that replays step times "
                         f"({', '.join(d for d in _import_detectors() if d != 'whatif')})",
                         str(args.run))
    run_data = load_run(args.run)
    t0 = time.perf_counter()
    findings = detector.detect_online(run_data) if args.online else detector.detect(run_data)
    write_findings(out, FindingsDocument(detector=args.detector, run=str(args.run),
                                         online=args.online, findings=findings))
    mode = "online" if args.online else "offline"
    print(f"{args.detector} ({mode}, unannotated import) on {args.run}: {len(findings)} "
          f"finding(s) in {time.perf_counter() - t0:.1f}s -> {out}")
    for f in findings:
        ranks = ", ".join(f"rank {r.rank}" for r in f.ranks) or "whole job"
        est = f", est. slowdown {f.estimated_slowdown:.2f}" if f.estimated_slowdown else ""
        kind = f"  ({f.detail['kind']})" if "kind" in (f.detail or {}) else ""
        print(f"  {f.root_cause.value:18s} {ranks}  steps {f.first_step}-{f.last_step}  "
              f"confidence {f.confidence:.2f}{est}{kind}")
    if detector.needs is TraceNeed.WHATIF and (line := _validity_line(args.run)):
        print("  " + line)
    return 0


def _import_detectors() -> list[str]:
    """The registered detectors that run on an unannotated import."""
    from stragglerlab.analysis.detectors import TraceNeed, detector_names, get_detector

    return [n for n in detector_names()
            if get_detector(n).needs is not TraceNeed.OP_VOCABULARY]


def _validity_line(run: str) -> str:
    """The run's what-if gate where its whatif.json (either model's) withholds the verdict:
    the findings stand, but the what-if they may rest on does not reproduce the trace."""
    from stragglerlab.run.whatif_reader import locate_whatif, read_whatif_summary

    try:
        validity = read_whatif_summary(locate_whatif(run)).validity
    except InputError:  # no what-if result, or a damaged one a detector reading it named
        return ""
    return f"what-if: {validity.banner()}" if not validity.valid else ""


def floor_line(report: dict) -> str:
    """One line on the run's noise floor: its family's clean S and what it raised."""
    if not report.get("measured"):
        return (f"noise floor: none for this run ({report['family']}; the shipped floor is "
                "this testbed's: measure yours with `stragglerlab noise-floor`)")
    s = report.get("clean_job_slowdown") or {}
    clean = f", clean S {s['min']:.3f}-{s['max']:.3f}" if s else ""
    raised = "; ".join(f"{k} {v['configured']:.3g} -> {v['used']:.3g}"
                       for k, v in report["raised"].items()) or "no threshold raised"
    if report.get("per_step") and report["raised"]:
        runs = (f", the highest of its {report['layout_runs']} clean runs of this layout"
                if report.get("layout_runs") else "")
        raised += (f" ({', '.join(report['per_step'])}: the floor's jitter in seconds per "
                   f"step{runs}, over this run's {report['step_s']:.3g} s steps)")
    below = len(report.get("below_floor") or [])
    ignored = report.get("ignored") or []
    skipped = (f"; ignored {', '.join(ignored[:4])} (not a threshold of this detector: a "
               "newer file's, or misspelt)") if ignored else ""
    return (f"noise floor ({report['family']}, {report['n_runs']} clean runs{clean}): "
            f"{raised}; {below} finding(s) under it, not counted{skipped}")
