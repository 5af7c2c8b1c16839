"""Benchmark: what the live monitor costs a real training job beside it (issue 32).

Trains the same clean scenario with and without `stragglerlab monitor` watching the run
folder, alternating the two arms within each repeat (off, on; then on, off: host drift
between runs falls on both arms alike), and reports per arm the median traced step time,
and per pair the ratio on / off. Besides that ratio, which host noise between two
processes can swamp, it reports the monitor's own CPU time (its process's rusage, read
with `os.wait4`) as a share of the CPU the job's ranks used (their `cpu/rank<r>.jsonl`
logs): what it takes from the job on a host whose cores the job fills.

The monitor is started the way `train --monitor` starts it (same flags, same nice).

    python benchmarks/bench_monitor_overhead.py [--scenario clean-dp2-pp2] [--steps 18]
        [--repeats 3] [--out /tmp/bench-monitor-overhead]

Prints a Markdown table and the summary line.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from stragglerlab.analysis.ground_truth import run_step_times
from stragglerlab.cli.monitor import MONITOR_NICE
from stragglerlab.run_queue_log import read_records
from stragglerlab.scenario import load_scenario


def _train(scenario: str, steps: int, seed: int, out: Path, monitor: bool) -> dict:
    """One training run; with `monitor`, a monitor process beside it from the start."""
    sc = load_scenario(scenario)
    train = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab", "train", "--scenario", scenario,
         "--steps", str(steps), "--seed", str(seed), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mon = None
    if monitor:
        mon = subprocess.Popen(
            [sys.executable, "-m", "stragglerlab", "monitor", "--run", str(out),
             "--dp", str(sc.parallel.dp), "--pp", str(sc.parallel.pp),
             "--warmup-steps", str(sc.run.warmup_steps), "--port", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.nice(MONITOR_NICE))  # noqa: PLW1509
    if train.wait() != 0:
        raise SystemExit(f"train failed for {out}")
    monitor_cpu = None
    if mon is not None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pid, status, usage = os.wait4(mon.pid, os.WNOHANG)
            if pid:
                monitor_cpu = usage.ru_utime + usage.ru_stime
                break
            time.sleep(0.5)
        else:
            mon.kill()
            raise SystemExit(f"the monitor on {out} did not stop after the run")
    job_cpu = sum(r.cpu_s for p in glob.glob(str(out / "cpu" / "rank*.jsonl"))
                  for r in read_records(p))
    times = run_step_times(out)
    return {"step_s": float(times.median()), "monitor_cpu_s": monitor_cpu,
            "job_cpu_s": job_cpu, "steps": len(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="clean-dp2-pp2")
    ap.add_argument("--steps", type=int, default=18)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-monitor-overhead"))
    args = ap.parse_args()
    rows = []
    for r in range(args.repeats):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {}
        for monitor in order:
            out = args.out / f"r{r}-{'on' if monitor else 'off'}"
            got[monitor] = _train(args.scenario, args.steps, 100 + r, out, monitor)
            print(f"repeat {r} monitor {'on ' if monitor else 'off'}: median step "
                  f"{got[monitor]['step_s']:.3f} s", file=sys.stderr)
        on, off = got[True], got[False]
        rows.append({"repeat": r, "off_s": off["step_s"], "on_s": on["step_s"],
                     "ratio": on["step_s"] / off["step_s"],
                     "cpu_share": on["monitor_cpu_s"] / max(on["job_cpu_s"], 1e-9),
                     "monitor_cpu_s": on["monitor_cpu_s"], "job_cpu_s": on["job_cpu_s"]})
    print("| repeat | median step, off (s) | median step, on (s) | on / off | monitor CPU (s) "
          "| job ranks' CPU (s) | monitor CPU / job CPU |\n|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['repeat']} | {x['off_s']:.3f} | {x['on_s']:.3f} | {x['ratio']:.4f} | "
              f"{x['monitor_cpu_s']:.1f} | {x['job_cpu_s']:.1f} | {100 * x['cpu_share']:.2f} % |")
    ratios = [x["ratio"] for x in rows]
    shares = [100 * x["cpu_share"] for x in rows]
    print(f"\n{args.scenario}, {args.steps} steps, {args.repeats} pairs: step time on/off "
          f"median {statistics.median(ratios):.4f} (range {min(ratios):.4f}-{max(ratios):.4f});"
          f" monitor CPU {statistics.median(shares):.2f} % of the job's (range "
          f"{min(shares):.2f}-{max(shares):.2f} %)")


if __name__ == "__main__":
    main()
