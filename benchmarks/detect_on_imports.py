"""Detectors on unannotated imports of the torch workloads: every applicable detector's
scores, and whether the `whatif` detector names the victim of every slow run and nothing
in every clean run.

For each workload (DDP, FSDP, pipelining) and seed: a clean run (`torch-<w>`) and a run
with one worker slowed 2x from step 6 (`torch-<w>-slow`), traced by torch.profiler alone
(`benchmarks/torch_workloads.py` trains them the same way). Each is imported with the
general op model and its ground truth, in the training's layout (`import kineto --traces
RUN/kineto --faults RUN/faults.json --layout dp=D,pp=P --out RUN/import-scored`); every
detector that runs on an import (`TraceNeed` not OP_VOCABULARY) is run offline, the
step-time ones online too; then `stragglerlab score --detector all` over all imports
prints the leaderboard.

    .venv/bin/python benchmarks/detect_on_imports.py [--seeds 0 1 2] [--reuse]
        [--out results/torch-workloads] [--json results.json] [--launcher local]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_workloads import train  # noqa: E402  (the one way these runs are trained)

PY = sys.executable


def cli(*args: str) -> str:
    return subprocess.run([PY, "-m", "stragglerlab", *args], check=True, text=True,
                          capture_output=True).stdout


def main() -> int:
    from stragglerlab.analysis.detectors import TraceNeed, detector_names, get_detector

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["ddp", "fsdp", "pipelining"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=Path("results/torch-workloads"))
    ap.add_argument("--reuse", action="store_true", help="keep run folders already there")
    ap.add_argument("--launcher", choices=["ray", "local"], default="ray",
                    help="train's launcher (local: plain processes, no Ray)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    needs = {n: get_detector(n).needs for n in detector_names()}
    usable = [n for n, need in needs.items() if need is not TraceNeed.OP_VOCABULARY]
    imports, rows = [], []
    for w in args.workloads:
        for seed in args.seeds:
            for kind in ("clean", "slow"):
                run = args.out / f"{w}-{kind}-{seed}"
                scenario = f"torch-{w}" + ("-slow" if kind == "slow" else "")
                train(scenario, seed, run, args.reuse, launcher=args.launcher)
                imp = run / "import-scored"
                shutil.rmtree(imp, ignore_errors=True)  # a rerun over --reuse'd runs
                # The training's layout: the ground truth names workers by (dp_rank,
                # stage), and pipelining's stages are not in its process groups' names.
                par = json.loads((run / "run.json").read_text())["scenario"]["parallel"]
                cli("import", "kineto", "--traces", str(run / "kineto"), "--faults",
                    str(run / "faults.json"), "--out", str(imp), "--quiet", "--layout",
                    f"dp={par['dp']},pp={par['pp']}")
                for name in usable:
                    cli("detect", "--run", str(imp), "--detector", name, "--quiet")
                    if needs[name] is TraceNeed.STEP_TIMES:
                        cli("detect", "--run", str(imp), "--detector", name, "--online",
                            "--quiet")
                truth = json.loads((run / "faults.json").read_text())
                found = json.loads((imp / "detect" / "whatif.json").read_text())["findings"]
                named = sorted({r["rank"] for f in found for r in f["ranks"]})
                victim = sorted({t["rank"] for f in truth for t in f["targets"]})
                whatif = json.loads((imp / "whatif.json").read_text())
                rows.append({"workload": w, "seed": seed, "kind": kind, "victim": victim,
                             "whatif_named": named, "right": named == victim,
                             "S": round(whatif["S"], 4),
                             "discrepancy": round(whatif["discrepancy"], 4)})
                print(json.dumps(rows[-1]), flush=True)
                imports.append(str(imp))
    board = subprocess.run([PY, "-m", "stragglerlab", "score", "--runs", *imports,
                            "--detector", "all", "--out", str(args.out / "scores-imports")],
                           check=True, text=True, capture_output=True).stdout
    print(board)
    right = sum(r["right"] for r in rows)
    print(f"whatif on imports: {right}/{len(rows)} runs right (the victim in every slow "
          "run, nothing in every clean run)")
    if args.json:
        scores = json.loads((args.out / "scores-imports" / "scores.json").read_text())
        args.json.write_text(json.dumps({"runs": rows, "scores": {
            n: {k: s.get(k) for k in ("f1", "precision", "recall", "root_cause_accuracy",
                                      "median_latency_steps")}
            for n, s in scores.items() if n != "schema"}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
