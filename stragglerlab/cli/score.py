"""`stragglerlab score`: score detectors against the runs' ground truth (faults.json).

    stragglerlab score --runs results/*/* --detector all --out results
    stragglerlab score --runs results/*/* --detector whatif rank-score --out results

For each run and detector it reads `<run>/detect/<name>.json` (offline) and
`<run>/detect/<name>-online.json` (online), as `stragglerlab detect` (or the
workflow's detect rule) wrote them. Prints a detector x metric table and a
per-fault-kind table; writes `scores.json` into --out: JSON keyed by detector
name, each with precision, recall, f1, root_cause_accuracy,
median_latency_steps, slowdown_error, confusion, by_kind and per-run rows
(analysis/scoring.py says how each is counted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from stragglerlab.atomic import atomic_write_json
from stragglerlab.cli.common import out_folder
from stragglerlab.errors import InputError

SCORES_NAME = "scores.json"
"""The file `score` writes inside its --out folder."""

METRICS = ("precision", "recall", "f1", "root_cause_accuracy", "median_latency_steps",
           "slowdown_error")


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="score detectors against ground truth over run folders")
    p.add_argument("--runs", nargs="+", required=True, help="run folders")
    p.add_argument("--detector", nargs="+", default=["all"],
                   help="detector name(s), or `all` (every registered detector)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder; writes scores.json")
    p.add_argument("--offline-only", action="store_true",
                   help="skip online replays that are not already on disk (no latency)")
    return p


def _load_findings(path: Path, detector: str):
    from stragglerlab.analysis.detectors import Finding

    try:
        doc = json.loads(path.read_text())
        if doc.get("detector") != detector:
            raise InputError(f"{path}: findings of {doc.get('detector')!r}, expected "
                             f"{detector!r}; rerun `stragglerlab detect`")
        return [Finding.from_dict(f) for f in doc["findings"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: not a findings file ({e}); rerun `stragglerlab detect`") \
            from None


def _findings(run_dir: str, name: str, online: bool, compute: bool, cache: dict):
    from stragglerlab.analysis.detectors import get_detector, load_run

    path = Path(run_dir) / "detect" / f"{name}{'-online' if online else ''}.json"
    if path.is_file():
        return _load_findings(path, name)
    if not compute:
        return None
    if run_dir not in cache:
        cache[run_dir] = load_run(run_dir)
    detector = get_detector(name)
    run_data = cache[run_dir]
    return detector.detect_online(run_data) if online else detector.detect(run_data)


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def table(scores: dict) -> str:
    """Readable detector x metric table, then detector x fault kind F1 / accuracy."""
    lines = [f"{'detector':18s} " + " ".join(f"{m[:14]:>14s}" for m in METRICS) + "  runs"]
    for name, s in scores.items():
        lines.append(f"{name:18s} " + " ".join(f"{_fmt(s[m]):>14s}" for m in METRICS)
                     + f"  {s['n_runs']}")
    kinds = sorted({k for s in scores.values() for k in s["by_kind"]})
    lines += ["", "per fault kind: F1 / root-cause accuracy / median latency (steps)",
              f"{'detector':18s} " + " ".join(f"{k[:16]:>16s}" for k in kinds)]
    for name, s in scores.items():
        cells = []
        for k in kinds:
            m = s["by_kind"].get(k)
            cells.append("-" if m is None else
                         f"{_fmt(m['f1'])}/{_fmt(m['root_cause_accuracy'])}/"
                         f"{_fmt(m['median_latency_steps'])}")
        lines.append(f"{name:18s} " + " ".join(f"{c:>16s}" for c in cells))
    return "\n".join(lines)


def run(args) -> int:
    """Score every requested detector over the runs."""
    from stragglerlab.analysis.detectors import detector_names
    from stragglerlab.analysis.ground_truth import load_truths
    from stragglerlab.analysis.scoring import score_suite

    out = out_folder(args.out) / SCORES_NAME
    names = detector_names() if "all" in args.detector else list(dict.fromkeys(args.detector))
    for name in names:
        if name not in detector_names():
            raise InputError(f"unknown detector {name!r}; available: "
                             f"{', '.join(detector_names())}")
    for r in args.runs:
        if not Path(r).is_dir():
            raise InputError(f"{r}: not a run folder")
    t0 = time.perf_counter()
    truths = load_truths(args.runs)
    scored = [t for t in truths if t.scored]
    say = (lambda msg: None) if args.quiet else \
        (lambda msg: print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr,
                           flush=True))
    say(f"{len(scored)} runs scored, {len(truths) - len(scored)} skipped (mitigation runs)")
    cache: dict = {}
    scores = {}
    for name in names:
        offline = {t.run: _findings(t.run, name, False, True, cache) for t in scored}
        online = {t.run: _findings(t.run, name, True, not args.offline_only, cache)
                  for t in scored}
        online = {k: v for k, v in online.items() if v is not None}
        suite = score_suite(scored, offline, online if online else None)
        scores[name] = suite.to_json()
        scores[name]["skipped_runs"] = [t.run for t in truths if not t.scored]
        say(f"scored {name}: F1 {_fmt(scores[name]['f1'])}, "
            f"root cause {_fmt(scores[name]['root_cause_accuracy'])}")
    atomic_write_json(out, scores)
    print(table(scores))
    return 0
