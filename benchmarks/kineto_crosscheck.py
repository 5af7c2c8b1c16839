"""Cross-check the Kineto importer on testbed runs made with `run: {profiler: kineto}`.

For each run folder: import its kineto/ traces, run the what-if on our own
trace and on the imported one (the CLI, as a user would), and print S, the
top worker (max worker_score) and the top stage (max slowdown_by_stage) of
both, plus the step time of the run (run.json) for the overhead comparison.

    .venv/bin/python benchmarks/kineto_crosscheck.py RUN_DIR... [--json out.json]

Acceptance: |S_imported / S_ours - 1| <= 2% and the same top
worker and stage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

PY = sys.executable


def whatif(trace: Path, meta: Path, out: Path) -> dict:
    subprocess.run([PY, "-m", "stragglerlab", "whatif", "--trace", str(trace), "--meta",
                    str(meta), "--out", str(out), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    j = json.loads((out / "whatif.json").read_text())
    ws = np.asarray(j["worker_score"])  # [stage][dp_rank]
    stage, dp = np.unravel_index(int(np.argmax(ws)), ws.shape)
    by_stage = {int(k): v for k, v in j["slowdown_by_stage"].items()}
    return {"S": j["slowdown"], "top_worker": {"dp_rank": int(dp), "stage": int(stage),
                                               "score": float(ws.max())},
            "top_stage": max(by_stage, key=by_stage.get), "by_stage": by_stage,
            "worker_score": ws.round(4).tolist()}


def step_time(run: Path) -> float | None:
    """Mean step time (s) of the traced steps (after warm-up) from run.json."""
    try:
        rec = json.loads((run / "run.json").read_text())
    except OSError:
        return None
    warm = rec["scenario"]["run"]["warmup_steps"]
    times = [t for s, t in rec["step_time_s"].items() if int(s) >= warm]
    return float(np.mean(times)) if times else None


def check(run: Path) -> dict:
    imported = run / "kineto-imported"
    subprocess.run([PY, "-m", "stragglerlab", "import", "kineto", "--traces",
                    str(run / "kineto"), "--out", str(imported), "--quiet"], check=True)
    ours = whatif(run / "trace.parquet", run / "meta.yaml", run / "whatif-ours")
    imp = whatif(imported / "trace.parquet", imported / "meta.yaml", run / "whatif-imported")
    rel = imp["S"] / ours["S"] - 1
    same_w = (ours["top_worker"]["dp_rank"], ours["top_worker"]["stage"]) == \
        (imp["top_worker"]["dp_rank"], imp["top_worker"]["stage"])
    return {"run": str(run), "ours": ours, "imported": imp, "S_rel_diff": rel,
            "ok_S": abs(rel) <= 0.02, "same_top_worker": same_w,
            "same_top_stage": ours["top_stage"] == imp["top_stage"],
            "step_time_s": step_time(run),
            "import": json.loads((imported / "import.json").read_text())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [check(r) for r in args.runs]
    for r in rows:
        o, i = r["ours"], r["imported"]
        print(f"{r['run']}: S ours {o['S']:.4f} imported {i['S']:.4f} "
              f"({100 * r['S_rel_diff']:+.2f}%); top worker ours (DP {o['top_worker']['dp_rank']}"
              f", PP {o['top_worker']['stage']}) {o['top_worker']['score']:.3f} imported (DP "
              f"{i['top_worker']['dp_rank']}, PP {i['top_worker']['stage']}) "
              f"{i['top_worker']['score']:.3f}; top stage ours {o['top_stage']} imported "
              f"{i['top_stage']}; align {r['import']['align']}; step time {r['step_time_s']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["ok_S"] and r["same_top_worker"] and r["same_top_stage"] for r in rows) \
        else 1


if __name__ == "__main__":
    sys.exit(main())
