"""Benchmark: the general path's cost as the job grows (the what-if on an unannotated
import's op table; with --kineto, the import of synthetic GPU traces too), and a paired
comparison with another checkout.

The op table is asv_bench.inputs.general_ops_at_dp: DP x PP (default 2) shaped like the
engine's pipelines, 5 steps, 4 microbatches, the forward receives posted ahead, one
slow rank. Each measurement is one child process that builds the table, then times
`whatif_general` alone (wall s) and reports the child's peak RSS (os.wait4's
ru_maxrss; the table is in it). --trees runs the same child with each checkout first on
sys.path, alternating per size and round, so a slow spell of the shared host touches
both; medians with min-max.

    python benchmarks/bench_general_scale.py [--dp 128 256 512 1024] [--pp 2]
        [--repeats 3] [--trees . ../other-checkout] [--json OUT.json]
    python benchmarks/bench_general_scale.py --kineto 256 512 1024 [--trees ...]

--kineto R ...: benchmarks/kineto_synth.py writes a DDP job's GPU traces of R ranks (0.2
MB of JSON a rank, 3 steps, rank 3 slow) into --data once; each child then times the
import's three parts (load_ranks: parsing, in reader processes; build_general: the op
table; whatif_general) instead of the op table above.

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


IMPORT_CHILD = """
import glob, json, time
from stragglerlab.importers.kineto_events import load_ranks
from stragglerlab.importers.kineto_general import build_general
from stragglerlab.analysis.whatif_general import whatif_general
t0 = time.perf_counter()
events = load_ranks(sorted(glob.glob({folder!r} + "/*.json.gz")))
t1 = time.perf_counter()
imp = build_general(events)
t2 = time.perf_counter()
res = whatif_general(imp.ops, report=imp.report)
t3 = time.perf_counter()
print(json.dumps({{"s": t3 - t2, "load_s": t1 - t0, "build_s": t2 - t1, "rows": len(imp.ops),
                  "S": res.S}}))
"""


def kineto_traces(data: Path, ranks: int) -> Path:
    """benchmarks/kineto_synth.py's traces of `ranks` ranks under `data` (written once)."""
    out = data / f"kineto-{ranks}"
    if not (out / f"rank{ranks - 1}.json.gz").is_file():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "kineto_synth.py"),
                        "--ranks", str(ranks), "--mb", "0.2", "--steps", "3", "--out",
                        str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def measure(tree: Path, dp: int, pp: int, folder: Path | None = None) -> dict:
    """One child: whatif_general's wall time, the child's peak RSS (MiB), rows, S (and
    the import's parts where `folder` holds traces to import)."""
    code = CHILD.format(inputs=str(REPO / "benchmarks" / "asv_bench" / "inputs.py"),
                        dp=dp, pp=pp) if folder is None else \
        IMPORT_CHILD.format(folder=str(folder))
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
    ap.add_argument("--kineto", type=int, nargs="+", metavar="RANKS",
                    help="import synthetic GPU traces of these rank counts instead")
    ap.add_argument("--data", type=Path, default=Path("benchmarks/data/general-scale"),
                    help="where --kineto's traces are written once (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    a = ap.parse_args()
    sizes = a.kineto or a.dp
    got: dict[tuple[str, int], list[dict]] = {}
    for rnd in range(a.repeats):
        for n in sizes:
            folder = kineto_traces(a.data, n) if a.kineto else None
            trees = a.trees if rnd % 2 == 0 else a.trees[::-1]
            for tree in trees:
                rec = measure(tree, n, a.pp, folder)
                got.setdefault((str(tree), n), []).append(rec)
                print(f"round {rnd + 1} size {n} {tree}: {rec['s']:.3f} s, "
                      f"{rec['rss_mib']:.0f} MiB, S {rec['S']:.6f}", file=sys.stderr)

    def med(recs: list[dict], k: str) -> str:
        v = [r[k] for r in recs]
        return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"

    if a.kineto:
        print("| tree | ranks | rows | load_ranks s | build_general s | whatif_general s "
              "| peak RSS MiB | S |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| tree | DP x PP | workers | rows | whatif_general s, median (min-max) "
              "| peak RSS MiB | S |")
        print("|---|---|---|---|---|---|---|")
    for (tree, n), recs in got.items():
        rss = f"{statistics.median(r['rss_mib'] for r in recs):.0f}"
        name = Path(tree).resolve().name
        if a.kineto:
            print(f"| {name} | {n:,} | {recs[0]['rows']:,} | {med(recs, 'load_s')} | "
                  f"{med(recs, 'build_s')} | {med(recs, 's')} | {rss} | {recs[0]['S']:.6f} |")
        else:
            print(f"| {name} | {n} x {a.pp} | {n * a.pp:,} | {recs[0]['rows']:,} | "
                  f"{med(recs, 's')} | {rss} | {recs[0]['S']:.6f} |")
    if a.json:
        a.json.write_text(json.dumps({f"{t}|{d}": v for (t, d), v in got.items()}, indent=1))


if __name__ == "__main__":
    main()
