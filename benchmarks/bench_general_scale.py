"""Benchmark: the general what-if's cost curve over DP sizes (an unannotated import's op
table), and a paired comparison with another checkout.

The op table is asv_bench.inputs.general_ops_at_dp: DP x PP (default 2) shaped like the
engine's pipelines, 5 steps, 4 microbatches, the forward receives posted ahead, one
slow rank. Each measurement is one child process that builds the table, then times
`whatif_general` alone (wall s) and reports the child's peak RSS (os.wait4's
ru_maxrss; the table is in it). --trees runs the same child with each checkout first on
sys.path, alternating per size and round, so a slow spell of the shared host touches
both; medians with min-max.

    python benchmarks/bench_general_scale.py [--dp 128 256 512 1024] [--pp 2]
        [--repeats 3] [--trees . ../other-checkout] [--json OUT.json]

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("inputs", {inputs!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
ops = mod.general_ops_at_dp({dp}, pp={pp})
from stragglerlab.analysis.whatif_general import whatif_general
t = time.perf_counter()
res = whatif_general(ops)
print(json.dumps({{"s": time.perf_counter() - t, "rows": len(ops), "S": res.S}}))
"""


def measure(tree: Path, dp: int, pp: int) -> dict:
    """One child: whatif_general's wall time, the child's peak RSS (MiB), rows, S."""
    code = CHILD.format(inputs=str(REPO / "benchmarks" / "asv_bench" / "inputs.py"),
                        dp=dp, pp=pp)
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read(), proc.stderr.read()
    if status != 0:
        sys.exit(f"the child for DP {dp} under {tree} failed:\n{err}")
    rec = json.loads(out.strip().splitlines()[-1])
    rec["rss_mib"] = usage.ru_maxrss / 1024
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trees", type=Path, nargs="+", default=[REPO],
                    help="checkouts to compare (each first on sys.path); default this one")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    a = ap.parse_args()
    got: dict[tuple[str, int], list[dict]] = {}
    for rnd in range(a.repeats):
        for dp in a.dp:
            trees = a.trees if rnd % 2 == 0 else a.trees[::-1]
            for tree in trees:
                rec = measure(tree, dp, a.pp)
                got.setdefault((str(tree), dp), []).append(rec)
                print(f"round {rnd + 1} DP {dp} {tree}: {rec['s']:.3f} s, "
                      f"{rec['rss_mib']:.0f} MiB, S {rec['S']:.6f}", file=sys.stderr)
    print("| tree | DP x PP | workers | rows | whatif_general s, median (min-max) "
          "| peak RSS MiB | S |")
    print("|---|---|---|---|---|---|---|")
    for (tree, dp), recs in got.items():
        s = [r["s"] for r in recs]
        print(f"| {Path(tree).resolve().name} | {dp} x {a.pp} | {dp * a.pp:,} | "
              f"{recs[0]['rows']:,} | {statistics.median(s):.3f} ({min(s):.3f}-{max(s):.3f}) "
              f"| {statistics.median(r['rss_mib'] for r in recs):.0f} | {recs[0]['S']:.6f} |")
    if a.json:
        a.json.write_text(json.dumps({f"{t}|{d}": v for (t, d), v in got.items()}, indent=1))


if __name__ == "__main__":
    main()
