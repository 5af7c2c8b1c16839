"""The two analysis paths of `import kineto` side by side on the same traces.

A trace annotated with our `record_function` ranges is read with the vocabulary op
model (`--op-model vocabulary`, then `stragglerlab whatif --run`); `--op-model
general` ignores the annotations and analyses only the communication ops and the
compute between them. On one job both should tell the same story. For each run this
imports its Kineto traces both ways (the CLI, as a user would) and reports, per path:
the slowdown S, the top workers as global ranks (the vocabulary path's (dp_rank,
stage) mapped through the imported trace's own rank column), the validity gate
(`validity.valid` and its reasons) and the straggling verdict; per run, the relative
difference S_general / S_vocab - 1 and the general import's matching (communication
ops matched across ranks vs left local). The summary counts the runs within 2 % in S,
with the same top worker, naming the same workers (the top workers where the verdict is
straggling, none otherwise), with the same gate outcome (same validity and verdict), and
with all three; and, where the run's ground truth (faults.json) names target ranks,
how often each path's top worker is one of them.

Run folders (with `kineto/rank<r>.json.gz`) or bare folders of per-rank traces:

    python benchmarks/two_path_differential.py RUN_DIR... [--json out.json] [--work DIR]

Or train the runs first (engine scenarios with `run: {profiler: kineto}`):

    python benchmarks/two_path_differential.py --train tp-clean-dp2-pp2:0 tp-slow-dp2-pp1:0 \
        --config benchmarks/two-path-scenarios.yaml --runs-dir /tmp/diff-runs --json out.json

Outputs of the imports go to RUN/two-path/{vocab,general} (for a bare trace folder:
--work, default a temporary folder); --reuse keeps those already there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.run.run_folder import RunFolder
from stragglerlab.run.whatif_reader import read_whatif_summary
from stragglerlab.run.whatif_summary import WhatIfSummary

PY = sys.executable
S_TOL = 0.02


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "stragglerlab", *args], capture_output=True, text=True,
                          check=False)


def _verdict(valid: bool, straggling: bool) -> str:
    if not valid:
        return "gated"
    return "straggling" if straggling else "not straggling"


def vocabulary(traces: Path, out: Path, reuse: bool = False) -> dict:
    path = out / "whatif" / "whatif.json"
    if not (reuse and path.exists()):
        # the script's own folder: an import refuses one that holds an earlier what-if
        shutil.rmtree(out, ignore_errors=True)
        imp = _cli("import", "kineto", "--op-model", "vocabulary", "--traces", str(traces),
                   "--out", str(out), "--quiet")
        if imp.returncode:
            return {"error": imp.stderr.strip()[-500:]}
        wi = _cli("whatif", "--run", str(out), "--quiet")
        if not path.exists():
            return {"error": wi.stderr.strip()[-500:]}
    kept = json.loads((out / "import.json").read_text()).get("kept_ranks", {})
    trace = pd.read_parquet(out / "trace.parquet", columns=["rank", "dp_rank", "stage"])
    coords = trace.drop_duplicates()
    to_rank = {(int(d), int(s)): int(kept.get(str(int(r)), int(r)))
               for r, d, s in coords.itertuples(index=False)}
    summary = read_whatif_summary(path)
    w = summary.workers
    cell = {int(r): (int(d), int(p)) for r, d, p in zip(w.rank, w.dp_rank, w.stage)}
    row = _reading(summary, lambda r: to_rank[cell[r]])
    return {**row, "top_workers_coords": [list(cell[r]) for r in summary.top_workers]}


def _reading(summary: WhatIfSummary, traced_rank) -> dict:
    """S, the gate, the verdict and the top workers of either path's what-if result, the
    workers as traced ranks (`traced_rank` of a summary's worker rank)."""
    w, v = summary.workers, summary.validity
    hottest = int(np.argmax(w.s))  # the first of equals, in rank order
    return {"S": summary.S, "discrepancy": v.discrepancy,
            "top_workers": [traced_rank(int(r)) for r in summary.top_workers],
            "max_score_rank": traced_rank(int(w.rank[hottest])),
            "max_score": float(w.s[hottest]), "valid": v.valid, "reasons": v.reasons,
            "straggling": bool(summary.straggling),
            "verdict": _verdict(v.valid, bool(summary.straggling))}


def general(traces: Path, out: Path, reuse: bool = False) -> dict:
    path = out / "whatif.json"
    if not (reuse and path.exists()):
        shutil.rmtree(out, ignore_errors=True)
        imp = _cli("import", "kineto", "--op-model", "general", "--traces", str(traces),
                   "--out", str(out), "--quiet")
        if not path.exists():
            return {"error": imp.stderr.strip()[-500:]}
    j = json.loads(path.read_text())
    meta = json.loads((out / "import.json").read_text())
    return {**_reading(read_whatif_summary(path), int),
            "comm_ops": meta["ops"], "matched_ops": meta["matched_ops"],
            "local_ops": meta["local_ops"], "released_groups": j.get("released_groups"),
            "implausible_groups": meta.get("implausible_groups_unmatched")}


def compare(run: Path, work: Path | None = None, reuse: bool = False) -> dict:
    traces = run / "kineto" if (run / "kineto").is_dir() else run
    if work is None:
        work = run / "two-path" if traces != run else Path(tempfile.mkdtemp(prefix="two-path-"))
    row: dict = {"run": str(run)}
    try:
        scen = json.loads((run / "run.json").read_text())["scenario"]
        row["scenario"] = f"{scen['name']} seed {scen['run']['seed']}"
        row["layout"] = f"dp{scen['parallel']['dp']}-pp{scen['parallel']['pp']}"
        row["faults"] = [f["kind"] for f in scen["faults"]]
    except (OSError, KeyError):
        pass
    row["targets"] = _targets(run)
    voc = vocabulary(traces, work / "vocab", reuse)
    gen = general(traces, work / "general", reuse)
    row["vocabulary"], row["general"] = voc, gen
    if "error" in voc or "error" in gen:
        return row
    if row["targets"]:
        for path, reading in (("vocabulary", voc), ("general", gen)):
            row[f"{path}_top_on_target"] = bool(set(reading["top_workers"])
                                                & set(row["targets"]))
    row["S_rel_diff"] = gen["S"] / voc["S"] - 1
    row["within_2pct"] = abs(row["S_rel_diff"]) <= S_TOL
    row["same_top_worker"] = set(voc["top_workers"]) == set(gen["top_workers"])
    row["same_gate"] = voc["valid"] == gen["valid"] and voc["verdict"] == gen["verdict"]
    row["same_named_workers"] = set(_named(voc)) == set(_named(gen))
    return row


def _targets(run: Path) -> list[int]:
    """The ranks the run's ground truth names (faults.json's targets; none for a clean
    run, a fault on every rank such as the GC pauses, or a folder of bare traces)."""
    if not (run / "faults.json").is_file():
        return []
    faults = RunFolder.open(run).faults
    return sorted({int(t["rank"]) for f in faults for t in f.targets if "rank" in t})


def _named(reading: dict) -> list[int]:
    """The workers a path names as stragglers: its top workers where its verdict is
    straggling, none otherwise (a job neither path calls straggling names nobody; its
    top worker is then the noise's)."""
    return reading["top_workers"] if reading["verdict"] == "straggling" else []


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "S_rel_diff" in r]
    return {"runs": len(rows), "compared": len(ok),
            "within_2pct": sum(r["within_2pct"] for r in ok),
            "same_top_worker": sum(r["same_top_worker"] for r in ok),
            "same_named_workers": sum(r["same_named_workers"] for r in ok),
            "same_gate": sum(r["same_gate"] for r in ok),
            "all_three": sum(r["within_2pct"] and r["same_top_worker"] and r["same_gate"]
                             for r in ok),
            "all_three_named": sum(r["within_2pct"] and r["same_named_workers"]
                                   and r["same_gate"] for r in ok),
            "max_abs_rel_diff": max((abs(r["S_rel_diff"]) for r in ok), default=None),
            "with_targets": sum(bool(r["targets"]) for r in ok),
            "vocabulary_top_on_target": sum(r.get("vocabulary_top_on_target", False)
                                            for r in ok),
            "general_top_on_target": sum(r.get("general_top_on_target", False) for r in ok)}


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) or "-"


def table(rows: list[dict]) -> str:
    head = ("| run | S vocab | S general | diff | top ranks vocab (max score) | top ranks "
            "general (max score) | targets | gate vocab | gate general | general: matched / "
            "local comm ops |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        v, g = r["vocabulary"], r["general"]
        name = r.get("scenario", r["run"])
        if "S_rel_diff" not in r:
            lines.append(f"| {name} | {v.get('S', v.get('error'))} | {g.get('S', g.get('error'))}"
                         " | | | | | | | |")
            continue
        lines.append(
            f"| {name} | {v['S']:.4f} | {g['S']:.4f} | {100 * r['S_rel_diff']:+.2f} % | "
            f"{_ranks(v['top_workers'])} ({v['max_score']:.3f}) | "
            f"{_ranks(g['top_workers'])} ({g['max_score']:.3f}) | {_ranks(r['targets'])} | "
            f"{v['verdict']} | {g['verdict']} | {g['matched_ops']} / {g['local_ops']} |")
    return "\n".join(lines)


def train(specs: list[str], config: Path, runs_dir: Path) -> list[Path]:
    out = []
    for spec in specs:
        name, _, seed = spec.partition(":")
        seed = seed or "0"
        run = runs_dir / name / seed
        if not (run / "kineto").is_dir():
            subprocess.run([PY, "-m", "stragglerlab", "train", "--scenario", name, "--seed", seed,
                            "--config", str(config), "--out", str(run), "--launcher", "local",
                            "--allow-failed-run", "--quiet"], check=True)
        out.append(run)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, help="run folders or trace folders")
    ap.add_argument("--train", nargs="+", default=[], metavar="SCENARIO[:SEED]")
    ap.add_argument("--config", type=Path, default=Path("benchmarks/two-path-scenarios.yaml"))
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/two-path-runs"))
    ap.add_argument("--work", type=Path, help="import outputs for a bare trace folder")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reuse", action="store_true",
                    help="keep the imports' outputs already in the work folders")
    args = ap.parse_args()
    runs = list(args.runs) + train(args.train, args.config, args.runs_dir)
    if not runs:
        ap.error("no runs: give run folders or --train")
    rows = [compare(r, args.work / r.name if args.work else None, args.reuse) for r in runs]
    summ = summary(rows)
    print(table(rows))
    print(f"\n{summ['compared']} of {summ['runs']} runs compared: {summ['within_2pct']} within "
          f"2 % in S, {summ['same_top_worker']} with the same top worker "
          f"({summ['same_named_workers']} naming the same workers), {summ['same_gate']} with "
          f"the same gate outcome; all three: {summ['all_three']} ({summ['all_three_named']} "
          f"with named workers); max |diff| {summ['max_abs_rel_diff']}")
    print(f"Of the {summ['with_targets']} runs whose ground truth names ranks, the top worker "
          f"is one of them on the vocabulary path in {summ['vocabulary_top_on_target']}, on "
          f"the general path in {summ['general_top_on_target']}")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "summary": summ}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
