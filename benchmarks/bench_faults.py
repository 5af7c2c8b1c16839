"""Benchmark: every fault kind's measured effect against its request, paper §6, mitigations.

Runs each scenario once (training on Ray + the what-if analysis of its trace)
and prints Markdown tables:

* requested vs measured magnitude per fault kind (faults.json);
* paper §6: for slow-worker-1..3, the measured job slowdown (mean step time
  over clean-dp2-pp2's) beside the what-if S of the faulty run;
* mitigations: throughput gain of gc-planned over gc-pauses, stage-rebalanced
  over stage-imbalance, seq-rebalanced over seq-imbalance, beside the paper's.

    python benchmarks/bench_faults.py [--out benchmarks/data/faults] [--only NAME ...] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from stragglerlab.analysis.whatif import ComputeIdeal, analyze
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.workloads.launcher import launch

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = ["clean-dp2-pp2", "slow-worker-1", "slow-worker-2", "slow-worker-3",
             "net-throttle", "net-delay", "gc-pauses", "gc-planned", "stage-imbalance",
             "stage-rebalanced", "seq-imbalance", "seq-rebalanced", "hang", "crash"]
PAPER_S6 = {"slow-worker-1": (1.16, 1.21), "slow-worker-2": (1.40, 1.42),
            "slow-worker-3": (2.03, 1.98)}
MITIGATIONS = [("gc-planned", "gc-pauses", 12.6), ("stage-rebalanced", "stage-imbalance", 9.9),
               ("seq-rebalanced", "seq-imbalance", 23.9)]


def run_one(name: str, out: Path) -> dict:
    t0 = time.monotonic()
    record = launch(load_scenario(name), out / name)
    row = {"name": name, "outcome": record["outcome"], "error": record["error"],
           "wall_s": time.monotonic() - t0,
           "faults": json.loads((out / name / "faults.json").read_text())}
    if (out / name / "trace.parquet").exists() and record["outcome"] == "ok":
        df, meta = read_trace(out / name / "trace.parquet", out / name / "meta.yaml")
        r = analyze(df, meta, where=name)
        r_med = analyze(df, meta, where=name, compute_ideal=ComputeIdeal.MEDIAN)
        row.update(t_actual=r.step_time_base.mean(), slowdown=r.slowdown,
                   slowdown_median=r_med.slowdown, discrepancy=r.simulation_discrepancy,
                   top=r.top_workers, top_median=r_med.top_workers)
    print(f"{name:18s} {row['outcome']:6s} {row['wall_s']:5.0f}s "
          f"step {1000 * row.get('t_actual', 0):7.1f} ms  S {row.get('slowdown', 0):.3f}  "
          f"{[f['measured'] for f in row['faults']]}", file=sys.stderr, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "data" / "faults"))
    ap.add_argument("--only", nargs="+", default=SCENARIOS)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per scenario; step times and S are averaged over them")
    args = ap.parse_args()
    out = Path(args.out)
    rows = {}
    for n in args.only:
        runs = [run_one(n, out / f"r{i}" if args.repeats > 1 else out)
                for i in range(args.repeats)]
        rows[n] = dict(runs[0])
        for key in ("t_actual", "slowdown", "slowdown_median"):
            if all(key in r for r in runs):
                rows[n][key] = sum(r[key] for r in runs) / len(runs)
    (out / "summary.json").write_text(json.dumps(rows, indent=1, default=str))

    print("\n| scenario | kind | requested | measured | outcome | step (ms) | what-if S |")
    print("|---|---|---|---|---|---:|---:|")
    for n, r in rows.items():
        for f in r["faults"] or [{"kind": "-", "requested": {}, "measured": {}}]:
            print(f"| {n} | {f['kind']} | {f['requested']} | {f['measured']} | {r['outcome']} "
                  f"| {1000 * r.get('t_actual', float('nan')):.1f} | "
                  f"{r.get('slowdown', float('nan')):.3f} |")
    clean = rows.get("clean-dp2-pp2", {}).get("t_actual")
    if clean:
        print("\n| level | paper measured / estimated | our measured job slowdown | "
              "what-if S (mean ideal) | error | what-if S (median ideal) | error | "
              "top worker (DP, PP) |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for n, (pm, pe) in PAPER_S6.items():
            if "t_actual" in rows.get(n, {}):
                measured = rows[n]["t_actual"] / clean
                est, med = rows[n]["slowdown"], rows[n]["slowdown_median"]
                print(f"| {n} | {pm} / {pe} | {measured:.3f} | {est:.3f} | "
                      f"{100 * (est / measured - 1):+.1f}% | {med:.3f} | "
                      f"{100 * (med / measured - 1):+.1f}% | {rows[n]['top'][0]} |")
    print("\n| mitigation | vs | our throughput gain | paper |")
    print("|---|---|---:|---:|")
    for good, bad, paper in MITIGATIONS:
        if "t_actual" in rows.get(good, {}) and "t_actual" in rows.get(bad, {}):
            gain = rows[bad]["t_actual"] / rows[good]["t_actual"] - 1
            print(f"| {good} | {bad} | {100 * gain:+.1f}% | +{paper}% |")


if __name__ == "__main__":
    main()
