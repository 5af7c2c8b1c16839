"""Benchmark: the what-if's cost curve, 1,024 to 16,384 workers, and its fastest-growing part.

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

Where the time goes: every run prints its progress lines (one as each stage of the
verb ends), and their arrival times split it into the parts of STAGES with no
profiler in the way; medians per part and size, and the part whose time grows most
from the smallest size to the largest (of those with at least 5 % of the largest
run) is named.

    python benchmarks/bench_whatif_scale.py [--dp 64 128 256 512 1024] [--pp 16]
        [--microbatches 16] [--steps 8] [--repeats 3] [--data /tmp/whatif-scale]
        [--json OUT.json]

Prints Markdown tables (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STAGES = [  # (part, how the verb's progress line that closes it begins, what)
    ("read + validate", "read ", "parquet read, casts, schema and plausibility checks"),
    ("graph", "graph:", "the dependency graph from one worker-step"),
    ("build frame", "frame:", "the trace into [op, step, DP rank] arrays"),
    ("replay", "simulated base", "the traced and no-delay replays"),
    ("ideal", "simulated the ideal", "each compute ideal's replay"),
    ("by op type", "attributed to", "restore each op type (one replay each)"),
    ("by stage", None, "restore each stage (one replay each)"),
    ("by DP rank", None, "restore each DP rank (batched replays)"),
    ("M_W, M_S", "computed M_W", "the fix metrics"),
    ("launch", "attributed launch", "launch-delay attribution"),
    ("outputs", "wrote", "regime, notes, whatif.json, artifact-format/"),
]
"""The parts of one `stragglerlab whatif` process, timed by its own progress lines (on
stderr, one as each stage ends; nothing else is added to the run). Three stages print
"attributed to ...": op types, stages, DP ranks. Start-up (interpreter, imports, the
CLI parser) is the time to the first line less the verb's own clock there, and exit is
the time after the last line."""


def _stage(message: str) -> str:
    if message.startswith("attributed to "):
        if "op types" in message:
            return "by op type"
        return "by stage" if message.endswith("stages") else "by DP rank"
    for part, start, _what in STAGES:
        if start and message.startswith(start):
            return part
    return "other"


def run_measured(cmd: list[str], log: Path) -> tuple[int, float, float, float, dict]:
    """Run cmd as a child; (exit code, wall s, CPU s = user + sys, peak RSS MiB, seconds per
    part of STAGES), from the child's own rusage (os.wait4: RUSAGE_CHILDREN would be the
    maximum over all children) and the arrival times of its progress lines."""
    parts: dict[str, float] = {}
    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.PIPE, text=True)
        last = None
        for line in proc.stderr:  # the child's stderr is line-buffered
            now = time.perf_counter() - t0
            out.write(line)
            m = re.match(r"\[\s*([0-9.]+)s\] (.*)", line)
            if not m:
                continue
            if last is None:  # the verb's clock starts after start-up
                parts["start-up"] = now - float(m.group(1))
                last = parts["start-up"]
            part = _stage(m.group(2))
            parts[part] = parts.get(part, 0.0) + now - last
            last = now
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    if last is not None:
        parts["exit"] = wall - last
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here
    return (proc.returncode, wall, usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024, parts)  # Linux: KiB


def synth(data: Path, dp: int, pp: int, mb: int, steps: int) -> tuple[Path, dict | None]:
    """The run folder of the job at this layout, written by `stragglerlab synth` unless
    already there; returns it and synth's measurement (None when reused)."""
    run = data / f"dp{dp}-pp{pp}-mb{mb}-s{steps}"
    if (run / "trace.parquet").is_file() and (run / "faults.json").is_file():
        return run, None
    data.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "stragglerlab", "synth", "--out", str(run), "--dp", str(dp),
           "--pp", str(pp), "--microbatches", str(mb), "--steps", str(steps), "--quiet"]
    code, wall, _cpu, peak, _parts = run_measured(cmd, data / f"synth-dp{dp}.log")
    if code:
        sys.exit(f"synth failed ({code}); see {data / f'synth-dp{dp}.log'}")
    return run, {"wall_s": wall, "peak_mib": peak}


def n_ops(run: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(run / "trace.parquet").metadata.num_rows


def whatif(run: Path, out: Path, log: Path) -> tuple[float, float, float, dict]:
    """One whole `stragglerlab whatif` process (progress lines on, for the stage times)."""
    cmd = [sys.executable, "-m", "stragglerlab", "whatif", "--run", str(run), "--out", str(out)]
    code, wall, cpu, peak, parts = run_measured(cmd, log)
    if code:
        sys.exit(f"whatif failed ({code}); see {log}")
    return wall, cpu, peak, parts


def _load(avg: tuple[float, float, float]) -> str:
    return " / ".join(f"{a:.1f}" for a in avg)


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
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    args = ap.parse_args()
    sizes = sorted(args.dp)

    runs, synth_cost = {}, {}
    for dp in sizes:
        runs[dp], synth_cost[dp] = synth(args.data, dp, args.pp, args.microbatches, args.steps)
        print(f"input dp={dp}: {runs[dp]} ({n_ops(runs[dp]):,} ops)", file=sys.stderr)
    walls = {dp: [] for dp in sizes}
    cpus = {dp: [] for dp in sizes}
    peaks = {dp: [] for dp in sizes}
    stages = {dp: [] for dp in sizes}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(args.repeats):
            for dp in sizes:
                wall, cpu, peak, parts = whatif(runs[dp], work / f"out-{dp}",
                                                work / "whatif.log")
                stages[dp].append(parts)
                walls[dp].append(wall)
                cpus[dp].append(cpu)
                peaks[dp].append(peak)
                print(f"repeat {r + 1} dp={dp}: {wall:.2f} s, CPU {cpu:.2f} s, {peak:.0f} MiB",
                      file=sys.stderr)
        load_after = os.getloadavg()

    print(f"\nDP x PP {args.pp}, {args.microbatches} microbatches, {args.steps} steps; "
          f"whole `stragglerlab whatif` processes, {args.repeats} runs a size, median "
          f"(min–max); load average (1, 5, 15 min) {_load(load_before)} before, "
          f"{_load(load_after)} after:\n")
    print("| workers | DP | ops | wall (s) | CPU (s) | peak RSS (MiB) | CPU µs per op | "
          "synth wall (s) | synth peak (MiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dp in sizes:
        ops = n_ops(runs[dp])
        sc = synth_cost[dp]
        print(f"| {dp * args.pp:,} | {dp:,} | {ops:,} | {fmt(walls[dp], 2)} | "
              f"{fmt(cpus[dp], 2)} | {fmt(peaks[dp], 0)} | "
              f"{statistics.median(cpus[dp]) / ops * 1e6:.2f} | "
              f"{'–' if sc is None else format(sc['wall_s'], '.1f')} | "
              f"{'–' if sc is None else format(sc['peak_mib'], '.0f')} |")
    lo, hi = sizes[0], sizes[-1]
    names = ["start-up"] + [p for p, *_ in STAGES] + ["other", "exit"]
    med = {dp: {n: statistics.median(r.get(n, 0.0) for r in stages[dp]) for n in names}
           for dp in sizes}
    names = [n for n in names if any(med[dp][n] > 0 for dp in sizes)]
    what = {p: w for p, _s, w in STAGES} | {
        "start-up": "interpreter start, imports, the CLI parser", "exit": "after the last line"}
    print(f"\nWhere the time goes (seconds, median of the runs above, from the verb's progress "
          f"lines; growth = DP {hi} over DP {lo}, workers ×{hi // lo}):\n")
    print("| part | " + " | ".join(f"DP {dp}" for dp in sizes) + " | growth | what |")
    print("|---|" + "---:|" * (len(sizes) + 1) + "---|")
    growth = {}
    for name in names:
        vals = [med[dp][name] for dp in sizes]
        growth[name] = vals[-1] / vals[0] if vals[0] > 0 else float("inf")
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals)
              + f" | ×{growth[name]:.1f} | {what.get(name, '')} |")
    total = statistics.median(walls[hi])
    big = {n: g for n, g in growth.items() if med[hi][n] >= 0.05 * total}
    fastest = max(big, key=big.get)
    print(f"\nFastest-growing part (of those with ≥ 5 % of the wall time at DP {hi}): "
          f"**{fastest}**, ×{big[fastest]:.1f} for ×{hi // lo} workers, "
          f"{100 * med[hi][fastest] / total:.0f} % of the run at DP {hi}.")
    if args.json:
        args.json.write_text(json.dumps({
            "pp": args.pp, "microbatches": args.microbatches, "steps": args.steps,
            "load_before": load_before, "load_after": load_after,
            "sizes": {dp: {"ops": n_ops(runs[dp]), "wall_s": walls[dp], "cpu_s": cpus[dp],
                           "peak_mib": peaks[dp],
                           "synth": synth_cost[dp], "stages_s": stages[dp]}
                      for dp in sizes}}, indent=1))


if __name__ == "__main__":
    main()
