"""Benchmark: what the live monitor costs a real training job beside it.

Trains the same clean scenario with and without `stragglerlab monitor` watching the run
folder, alternating the two arms within each repeat (off, on; then on, off: host drift
between runs falls on both arms alike), and reports per arm the median traced step time,
and per pair the ratio on / off. Besides that ratio, which host noise between two
processes can swamp, it reports the monitor's own CPU time (its process's rusage, read
with `os.wait4`) as a share of the CPU the job's ranks used (their `cpu/rank<r>.jsonl`
logs): what it takes from the job on a host whose cores the job fills.

The monitor is started the way `train --monitor` starts it (same flags, same nice).

`--toggle-s T` measures inside one run instead (an in-run control, as §6 does: this
host's speed drifts between processes by more than the 1 % asked for): the monitor
watches the run from the start, and every T seconds it is paused (SIGSTOP) or resumed
(SIGCONT). A traced step wholly inside an "on" span is an on step, wholly inside an
"off" span an off step (the trace clock is CLOCK_MONOTONIC, as time.monotonic here);
steps across a switch are left out, as are the first two spans (start-up). Each on
span's mean step time is divided by the mean of its two neighbouring off spans
(drift cancels to first order); reported: the mean of those ratios with a 95 %
t-interval. A resumed monitor first analyses the steps it missed, so the on spans
carry that catch-up too: the estimate errs high.

    python benchmarks/bench_monitor_overhead.py [--scenario clean-dp2-pp2] [--steps 18]
        [--repeats 3] [--out /tmp/bench-monitor-overhead]
    python benchmarks/bench_monitor_overhead.py --toggle-s 5 --steps 90 [--repeats 2]

Prints a Markdown table and the summary line.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from stragglerlab.analysis.fault_control import run_step_times
from stragglerlab.cli.monitor import MONITOR_NICE
from stragglerlab.run.run_queue_log import read_records
from stragglerlab.scenarios.scenario import load_scenario


def _await_folder(out: Path, train: subprocess.Popen) -> None:
    """Wait until train has made its run folder (the monitor refuses a missing one)."""
    deadline = time.monotonic() + 120
    while not (out / "meta.yaml").exists() and not (out / "status").is_dir():
        if train.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"train made no run folder at {out}")
        time.sleep(0.05)


def _start(scenario: str, steps: int, seed: int, out: Path, monitor: bool
           ) -> tuple[subprocess.Popen, subprocess.Popen | None]:
    """A training run, and with `monitor` a monitor process on its folder as `train
    --monitor` starts one (same flags, same nice), once the folder exists."""
    train = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab", "train", "--scenario", scenario,
         "--steps", str(steps), "--seed", str(seed), "--out", str(out), "--quiet",
         "--overwrite"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not monitor:
        return train, None
    _await_folder(out, train)
    sc = load_scenario(scenario)
    mon = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab", "monitor", "--run", str(out),
         "--dp", str(sc.parallel.dp), "--pp", str(sc.parallel.pp),
         "--warmup-steps", str(sc.run.warmup_steps), "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.nice(MONITOR_NICE))  # noqa: PLW1509
    return train, mon


def _train(scenario: str, steps: int, seed: int, out: Path, monitor: bool) -> dict:
    """One training run; with `monitor`, a monitor process beside it from the start."""
    train, mon = _start(scenario, steps, seed, out, monitor)
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


def _toggled(scenario: str, steps: int, seed: int, out: Path, period_s: float) -> dict:
    """One run with the monitor paused and resumed every period_s (see the module doc)."""
    from stragglerlab.run.run_folder import RunFolder

    train, mon = _start(scenario, steps, seed, out, monitor=True)
    switches, on = [time.monotonic()], True  # span i: [switches[i], switches[i + 1])
    try:
        while train.poll() is None:
            time.sleep(0.02)
            if time.monotonic() - switches[-1] >= period_s:
                on = not on
                mon.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
                switches.append(time.monotonic())
    finally:
        mon.send_signal(signal.SIGCONT)
        mon.send_signal(signal.SIGTERM)
        mon.wait(timeout=60)
    if train.returncode != 0:
        raise SystemExit(f"train failed for {out}")
    switches.append(time.monotonic())
    folder = RunFolder(path=out)
    if not (out / "monitor" / "windows.jsonl").exists():
        raise SystemExit(f"the monitor wrote no windows for {out}: it did not run")
    origin = folder.record.trace.clock_origin_monotonic_s  # trace times are from here
    trace = folder.trace()[["step", "start_ts", "duration"]]
    end = origin + (trace["start_ts"] + trace["duration"]).groupby(trace["step"]).max()
    start = origin + trace.groupby("step")["start_ts"].min()
    edges = np.asarray(switches)
    span_a = np.searchsorted(edges, start.to_numpy(), side="right") - 1
    span_b = np.searchsorted(edges, end.to_numpy(), side="right") - 1
    inside = (span_a == span_b) & (span_a >= 2)
    per_span: dict[int, list[float]] = {}
    for s_, t in zip(span_a[inside], (end - start).to_numpy()[inside], strict=True):
        per_span.setdefault(int(s_), []).append(float(t))
    means = {k: statistics.fmean(v) for k, v in per_span.items()}
    ratios = [means[k] / statistics.fmean([means[k - 1], means[k + 1]])
              for k in means if k % 2 == 0 and k - 1 in means and k + 1 in means]
    return {"ratios": ratios, "on_steps": sum(len(v) for k, v in per_span.items() if k % 2 == 0),
            "off_steps": sum(len(v) for k, v in per_span.items() if k % 2 == 1),
            "spans": len(switches) - 1}


T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
"""Student's t, 97.5th percentile, by degrees of freedom (the nearest listed at or below)."""


def _t975(df: int) -> float:
    return T975[max(k for k in T975 if k <= df)] if df < 60 else 1.96


def _toggle_main(args) -> None:
    ratios: list[float] = []
    for r in range(args.repeats):
        got = _toggled(args.scenario, args.steps, 100 + r, args.out / f"toggle-r{r}",
                       args.toggle_s)
        ratios += got["ratios"]
        print(f"repeat {r}: {got['spans']} spans, {got['on_steps']} on / {got['off_steps']} "
              f"off steps; on / neighbouring off per span: "
              + ", ".join(f"{x:.4f}" for x in got["ratios"]), file=sys.stderr)
    m = statistics.fmean(ratios)
    half = _t975(len(ratios) - 1) * statistics.stdev(ratios) / len(ratios) ** 0.5 \
        if len(ratios) > 1 else float("nan")
    print(f"{args.scenario}, {args.steps} steps x {args.repeats} run(s), monitor paused / "
          f"resumed every {args.toggle_s:g} s: step time on / off {m:.4f} "
          f"(95 % CI {m - half:.4f}-{m + half:.4f}, {len(ratios)} on spans)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="clean-dp2-pp2")
    ap.add_argument("--steps", type=int, default=18)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-monitor-overhead"))
    ap.add_argument("--toggle-s", type=float,
                    help="measure inside each run: pause / resume the monitor every this "
                         "many seconds (the module doc)")
    args = ap.parse_args()
    if args.toggle_s:
        _toggle_main(args)
        return
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
