"""Benchmark: the what-if's cost curve from 1,024 to 16,384 workers, and the part that grows fastest.

The job is `stragglerlab synth`'s DP x PP 16 (1F1B, 16 microbatches, 8 steps) at
DP 64, 128, 256, 512 and 1,024 (1,024 to 16,384 workers). Each input is written
once by a whole `stragglerlab synth` process into --data (kept and reused while its
meta.yaml names the same layout), whose time and peak memory are reported too.

Each measurement is a whole `stragglerlab whatif --run DIR --quiet` process
(interpreter start, imports, reading and validating the trace, the analysis with
every compute ideal, whatif.json and artifact-format/), wall time and peak RSS (the
child's own ru_maxrss, from os.wait4). --repeats rounds run every size in turn
(smallest first), so a slow spell of the shared machine touches every size;
medians with min-max.

Where the time goes: one extra run per size under cProfile, its total split into
disjoint parts (cumulative times of the functions named in PARTS; the rest of a
parent is its own part). The profiler inflates many-small-call parts, so the
shares, not the seconds, are what it reports; the part whose time grows most from
the smallest size to the largest is named.

    python benchmarks/bench_whatif_scale.py [--dp 64 128 256 512 1024] [--pp 16]
        [--microbatches 16] [--steps 8] [--repeats 3] [--data /tmp/whatif-scale]
        [--no-profile] [--json OUT.json]

Prints Markdown tables (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_whatif import run_measured  # noqa: E402  (a sibling script, not a package)

REPO = Path(__file__).resolve().parents[1]

PARTS = [  # (name, profiled function as "file:function", parent part or None, what)
    ("total", None, None, "the whole process"),
    ("start-up", None, "total", "interpreter start, imports, the CLI parser"),
    ("whatif verb", "cli/whatif.py:run", "total", ""),
    ("read parquet", "trace_io.py:read_trace", "whatif verb", "parquet read and casts"),
    ("validate", "validate.py:validate_trace", "read parquet", "schema, completeness, "
                                                              "plausibility"),
    ("analysis", "analysis/whatif.py:run_whatif", "whatif verb",
     "the rest of run_whatif: graph, ideals, masks, metrics, regime"),
    ("build frame", "analysis/frame.py:build_frame", "analysis", "trace into [node, step, DP]"),
    ("simulate", "analysis/simulate.py:simulate", "analysis", "every replay of the graph"),
    ("outputs", None, "whatif verb", "whatif.json, artifact-format/"),
]
"""The profile's disjoint parts: a named part's time is its function's cumulative time
less its named children's; a part with no function is what its parent leaves."""


def synth(data: Path, dp: int, pp: int, mb: int, steps: int) -> tuple[Path, dict | None]:
    """The run folder of the job at this layout, written by `stragglerlab synth` unless
    already there; returns it and synth's measurement (None when reused)."""
    run = data / f"dp{dp}-pp{pp}-mb{mb}-s{steps}"
    if (run / "trace.parquet").is_file() and (run / "faults.json").is_file():
        return run, None
    data.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "stragglerlab", "synth", "--out", str(run), "--dp", str(dp),
           "--pp", str(pp), "--microbatches", str(mb), "--steps", str(steps), "--quiet"]
    code, wall, peak = run_measured(cmd, REPO, data / f"synth-dp{dp}.log")
    if code:
        sys.exit(f"synth failed ({code}); see {data / f'synth-dp{dp}.log'}")
    return run, {"wall_s": wall, "peak_mib": peak}


def n_ops(run: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(run / "trace.parquet").metadata.num_rows


def whatif(run: Path, out: Path, log: Path, profile: Path | None = None) -> tuple[float, float]:
    prefix = [sys.executable] + (["-m", "cProfile", "-o", str(profile)] if profile else [])
    cmd = prefix + ["-m", "stragglerlab", "whatif", "--run", str(run), "--out", str(out),
                    "--quiet"]
    code, wall, peak = run_measured(cmd, REPO, log)
    if code:
        sys.exit(f"whatif failed ({code}); see {log}")
    return wall, peak


def parts(profile: Path) -> dict[str, float]:
    """Disjoint seconds per part of PARTS from one cProfile output."""
    stats = pstats.Stats(str(profile)).stats  # (file, line, func) -> (cc, nc, tt, ct, callers)
    cum: dict[str, float] = {}
    for name, fn, _parent, _what in PARTS:
        if fn is None:
            continue
        path, func = fn.split(":")
        cum[name] = sum(v[3] for (file, _line, f), v in stats.items()
                        if f == func and file.endswith("/" + path))
    total = max(v[3] for v in stats.values())
    own = {"total": total, **cum}
    for name, _fn, parent, _what in PARTS:
        if parent is not None and name in cum:
            own[parent] -= cum[name]
    for name, fn, parent, _what in PARTS:  # a part with no function: its parent's rest
        if fn is None and parent is not None:
            own[name], own[parent] = own[parent], 0.0
    own["total"] = total
    return own


def fmt(values: list[float], digits: int) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "whatif-scale",
                    help="where the synthetic runs are written and kept")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled runs")
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    args = ap.parse_args()
    sizes = sorted(args.dp)

    runs, synth_cost = {}, {}
    for dp in sizes:
        runs[dp], synth_cost[dp] = synth(args.data, dp, args.pp, args.microbatches, args.steps)
        print(f"input dp={dp}: {runs[dp]} ({n_ops(runs[dp]):,} ops)", file=sys.stderr)
    walls = {dp: [] for dp in sizes}
    peaks = {dp: [] for dp in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(args.repeats):
            for dp in sizes:
                wall, peak = whatif(runs[dp], work / f"out-{dp}", work / "whatif.log")
                walls[dp].append(wall)
                peaks[dp].append(peak)
                print(f"repeat {r + 1} dp={dp}: {wall:.2f} s, {peak:.0f} MiB", file=sys.stderr)
        shares = {}
        if not args.no_profile:
            for dp in sizes:
                prof = work / f"prof-{dp}.out"
                whatif(runs[dp], work / f"out-{dp}", work / "whatif.log", prof)
                shares[dp] = parts(prof)

    print(f"\nDP x PP {args.pp}, {args.microbatches} microbatches, {args.steps} steps; "
          f"whole `stragglerlab whatif` processes, {args.repeats} runs a size, median "
          "(min–max):\n")
    print("| workers | DP | ops | wall (s) | peak RSS (MiB) | µs per op | synth wall (s) | "
          "synth peak (MiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dp in sizes:
        ops = n_ops(runs[dp])
        sc = synth_cost[dp]
        print(f"| {dp * args.pp:,} | {dp:,} | {ops:,} | {fmt(walls[dp], 2)} | "
              f"{fmt(peaks[dp], 0)} | {statistics.median(walls[dp]) / ops * 1e6:.2f} | "
              f"{'–' if sc is None else format(sc['wall_s'], '.1f')} | "
              f"{'–' if sc is None else format(sc['peak_mib'], '.0f')} |")
    if shares:
        lo, hi = sizes[0], sizes[-1]
        names = [n for n, *_ in PARTS if n not in ("total", "whatif verb")]
        print(f"\nWhere the time goes (one cProfile run a size; seconds under the profiler, "
              f"growth = DP {hi} over DP {lo}, workers ×{hi // lo}):\n")
        print("| part | " + " | ".join(f"DP {dp}" for dp in sizes) + " | growth | what |")
        print("|---|" + "---:|" * (len(sizes) + 1) + "---|")
        growth = {}
        for name in names:
            vals = [shares[dp].get(name, 0.0) for dp in sizes]
            growth[name] = vals[-1] / vals[0] if vals[0] > 0 else float("inf")
            what = next(w for n, _f, _p, w in PARTS if n == name)
            print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals)
                  + f" | ×{growth[name]:.1f} | {what} |")
        total = [shares[dp]["total"] for dp in sizes]
        print("| total | " + " | ".join(f"{v:.2f}" for v in total)
              + f" | ×{total[-1] / total[0]:.1f} | |")
        big = {n: g for n, g in growth.items() if shares[hi].get(n, 0) >= 0.05 * total[-1]}
        fastest = max(big, key=big.get)
        print(f"\nFastest-growing part (of those with ≥ 5 % of the time at DP {hi}): "
              f"**{fastest}**, ×{big[fastest]:.1f} for ×{hi // lo} workers, "
              f"{100 * shares[hi][fastest] / total[-1]:.0f} % of the profiled run at DP {hi}.")
    if args.json:
        args.json.write_text(json.dumps({
            "pp": args.pp, "microbatches": args.microbatches, "steps": args.steps,
            "sizes": {dp: {"ops": n_ops(runs[dp]), "wall_s": walls[dp], "peak_mib": peaks[dp],
                           "synth": synth_cost[dp], "profile_s": shares.get(dp)}
                      for dp in sizes}}, indent=1))


if __name__ == "__main__":
    main()
