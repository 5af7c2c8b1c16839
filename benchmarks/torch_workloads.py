"""The acceptance bars of the torch-wrapper workloads (DDP, FSDP, pipelining).

For each workload and repeat (seed): a clean run (`torch-<w>`) and a run with one
slow worker from step 6 (`torch-<w>-slow`), both traced by torch.profiler alone;
each imported with `stragglerlab import kineto --traces RUN/kineto` (the general op
model, no annotations). Reported per pair:

* `S_clean`: S of the clean run's import (bar: <= 1.05);
* `S_fault`: the mean per-step S of the slow run's import over the fault window
  (steps >= first_step), and `S_pre` over its clean steps before it;
* `meas_vs_clean`: mean step time in the window over the clean run's, same steps
  (bar: S_fault within 3 % of it);
* `meas_in_run`: mean step time in the window over the same run's steps before
  it (the in-run control: this host's speed drifts between processes);
* `S_in_run`: S_fault / S_pre, the estimate against the same in-run control;
* `top`: the import's top worker (max worker_score) against the victim.

Step times are rank 0's (run.json `step_time_s`; the ranks leave every step
together). Runs go under --out (default /tmp/torch-workloads).

    .venv/bin/python benchmarks/torch_workloads.py [--workloads ddp fsdp pipelining]
        [--repeats 2 | --seeds 2 3] [--config FILE] [--launcher ray|local] [--reuse]
        [--out DIR] [--compute-ideal mean|median]
        [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PY = sys.executable


def train(scenario: str, seed: int, out: Path, reuse: bool = False,
          config: Path | None = None, launcher: str = "ray") -> dict:
    if reuse and (out / "run.json").exists():  # --reuse: score the runs already there
        run = json.loads((out / "run.json").read_text())
        if run.get("outcome") == "ok":  # a failed one is trained again
            return run
    extra = ["--config", str(config)] if config else []
    subprocess.run(["nice", "-n", "5", PY, "-m", "stragglerlab", "train", "--scenario",
                    scenario, "--seed", str(seed), "--out", str(out), "--quiet", "--overwrite",
                    "--launcher", launcher, *extra],
                   check=True)
    return json.loads((out / "run.json").read_text())


def import_kineto(run: Path, compute_ideal: str = "mean") -> dict:
    subprocess.run([PY, "-m", "stragglerlab", "import", "kineto", "--traces",
                    str(run / "kineto"), "--out", str(run / "import"), "--quiet",
                    "--compute-ideal", compute_ideal], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((run / "import" / "whatif.json").read_text())


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def score(clean_run: dict, clean_w: dict, slow_run: dict, slow_w: dict, faults: list) -> dict:
    """The acceptance numbers of one (clean, slow) pair."""
    fault = faults[0]
    first, victim = fault["first_step"], fault["targets"][0]["rank"]
    warm = slow_run["scenario"]["run"]["warmup_steps"]
    t_slow = {int(k): v for k, v in slow_run["step_time_s"].items()}
    t_clean = {int(k): v for k, v in clean_run["step_time_s"].items()}
    window = [s for s in sorted(t_slow) if s >= first and s in t_clean]
    before = [s for s in sorted(t_slow) if warm <= s < first]
    per_step = {int(k): v for k, v in slow_w["per_step"].items()}
    scores = slow_w["worker_score"]
    top = max(scores, key=scores.get)
    s_pre = _mean([per_step[s] for s in before if s in per_step])
    s_fault = _mean([per_step[s] for s in window if s in per_step])
    t_window = _mean([t_slow[s] for s in window])
    return {
        "S_clean": round(clean_w["S"], 4),
        "S_whole": round(slow_w["S"], 4),
        "S_pre": round(s_pre, 4),
        "S_fault": round(s_fault, 4),
        "S_in_run": round(s_fault / s_pre, 4),
        "meas_vs_clean": round(t_window / _mean([t_clean[s] for s in window]), 4),
        "meas_in_run": round(t_window / _mean([t_slow[s] for s in before]), 4),
        "factor_measured": (fault.get("measured") or {}).get("factor"),
        "top": int(top), "victim": victim,
        "discrepancy_clean": round(clean_w["discrepancy"], 4),
        "discrepancy_slow": round(slow_w["discrepancy"], 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["ddp", "fsdp", "pipelining"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/torch-workloads"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--seeds", type=int, nargs="+", help="these seeds instead of 0..repeats-1")
    ap.add_argument("--config", type=Path,
                    help="YAML merged over the built-in scenarios (stragglerlab train --config)")
    ap.add_argument("--launcher", choices=["ray", "local"], default="ray",
                    help="stragglerlab train --launcher (local: no Ray, e.g. a lent machine)")
    ap.add_argument("--compute-ideal", choices=["mean", "median"], default="mean",
                    help="import kineto --compute-ideal (median: for DP >= 3, where one slow "
                         "rank leaves the median clean)")
    ap.add_argument("--reuse", action="store_true",
                    help="re-import and score run folders already under --out")
    args = ap.parse_args()
    rows = []
    for w in args.workloads:
        for seed in args.seeds or range(args.repeats):
            clean, slow = args.out / f"{w}-clean-{seed}", args.out / f"{w}-slow-{seed}"
            clean_run = train(f"torch-{w}", seed, clean, args.reuse, args.config, args.launcher)
            slow_run = train(f"torch-{w}-slow", seed, slow, args.reuse, args.config,
                             args.launcher)
            row = {"workload": w, "seed": seed, **score(
                clean_run, import_kineto(clean, args.compute_ideal), slow_run,
                import_kineto(slow, args.compute_ideal),
                json.loads((slow / "faults.json").read_text()))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    for r in rows:
        ok = (abs(r["S_fault"] / r["meas_vs_clean"] - 1) <= 0.03, r["top"] == r["victim"],
              r["S_clean"] <= 1.05)
        print(f"{r['workload']:<11} seed {r['seed']}: S_clean {r['S_clean']:.3f} "
              f"S_fault {r['S_fault']:.3f} vs clean {r['meas_vs_clean']:.3f} "
              f"(in-run {r['meas_in_run']:.3f} vs S_fault/S_pre {r['S_in_run']:.3f}) "
              f"top {r['top']} "
              f"victim {r['victim']}  bars within3%/top/clean: {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
