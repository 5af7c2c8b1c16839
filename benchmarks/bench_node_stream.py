"""Benchmark: the live monitor across nodes: the lag from a step's end to the monitor's view,
and the monitor's memory over a long run, with every rank's trace part streamed (issue 61).

A `synth` trace of DP x PP workers (default 128 x 8 = 1,024) is laid over `--nodes`
simulated nodes (pipeline by pipeline, as the cluster launcher places ranks), each
with a run folder of its own, as on nodes without a shared filesystem. This process
builds each step's records ahead of its end (a tracer builds them as the ops run); one
writer process per node, at the step's end on CLOCK_MONOTONIC (the trace clock), appends
its ranks' records to their parts and then writes their status files, as a job's ranks
each write their own at once. A streamer thread pulls each node's new frames every
0.2 s (stragglerlab.run.part_stream `read_frames`, what `NodeHelper.read_parts`
returns) and writes them into the run folder of the monitor's host
(`PartReceiver.accept`), as workloads/cluster_stream.py does with the bytes Ray
carried; `stragglerlab monitor --run RUN --no-serve` (its own process, at its default
look) analyses each complete step's window.

Reported: the lag from a step's last op to its window being published
(`lag_from_step_end_s` of windows.jsonl; the page shows it within the server's 0.25 s
event poll), median and max over full windows, with the host's load average, and its
parts: how long after the step's end the nodes had written the parts and the status
files (a step is complete to the monitor once every rank's status says so), the
stream's lag from the parts being written to every rank's records of the step being on
the monitor's host (the part this path adds to a one-host run), and the monitor's own
`lag_s` (the window's analysis time is benchmarks/bench_monitor.py's, and falls behind
when it exceeds --step-s); the monitor's RSS (VmRSS sampled every second: first full
window, peak, last) and the receiver's held bytes. Ray's transport is left out (one
host: a copy through the object store; the e2e tests/e2e/test_monitor_cluster.py runs
the whole path). Steps past the source trace repeat its steps (renumbered), so a long
run needs no long trace.

    python benchmarks/bench_node_stream.py [--dp 128 --pp 8] [--nodes 4] [--steps 40]
        [--step-s 2.0] [--window-steps 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from stragglerlab.monitor.feed import step_records
from stragglerlab.run.part_stream import PartReceiver, read_frames
from stragglerlab.run.run_folder import write_status
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace

PULL_EVERY_S = 0.2
"""The streamer's pace (workloads.cluster_stream.STREAM_EVERY_S)."""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def node_writer(folder: str, jobs, done) -> None:
    """One simulated node's ranks: at each step's end (CLOCK_MONOTONIC, shared by the
    processes) append each rank's records to its part, then write each rank's status;
    report when both were written."""
    run = Path(folder)
    (run / "trace-parts").mkdir(parents=True, exist_ok=True)
    while (job := jobs.get()) is not None:
        step, step_end, blobs = job
        while (wait := step_end - time.monotonic()) > 0:
            time.sleep(wait)
        for rank, blob in blobs.items():
            with open(run / "trace-parts" / f"rank{rank}.bin", "ab") as f:
                f.write(blob)
        parts_at = time.monotonic()
        for rank in blobs:
            write_status(run / "status" / f"rank{rank}.json",
                         json.dumps({"rank": rank, "step": step, "started": step + 1}).encode())
        done.put((step, parts_at, time.monotonic()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, default=128)
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--source-steps", type=int, default=12,
                    help="steps of the synth trace, repeated to --steps")
    ap.add_argument("--step-s", type=float, default=2.0, help="seconds between two steps' ends")
    ap.add_argument("--window-steps", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--poll", type=float, default=0.5, help="the monitor's --poll (s)")
    args = ap.parse_args()
    dp, pp, world = args.dp, args.pp, args.dp * args.pp
    df, _ = synthesize_trace(SyntheticConfig(
        dp_size=dp, pp_size=pp, n_microbatches=args.microbatches, n_steps=args.source_steps,
        slow_workers=(SlowWorker(dp - 1, pp - 1, 1.5, args.source_steps // 2),)))
    by_step = {int(s): g for s, g in df.groupby("step", sort=True)}
    src_steps = sorted(by_step)
    per_node = -(-dp // args.nodes)  # DP ranks (whole pipelines) per node
    node_of = {s * dp + d: d // per_node for s in range(pp) for d in range(dp)}
    ranks_of = {n: sorted(r for r, m in node_of.items() if m == n) for n in range(args.nodes)}
    with tempfile.TemporaryDirectory(prefix="bench-node-stream-") as tmp:
        run = Path(tmp) / "monitor-host" / "run"
        run.mkdir(parents=True)
        nodes = {n: Path(tmp) / f"node-{n}" / "run" for n in range(args.nodes)}
        receiver = PartReceiver(run)
        stop = threading.Event()
        stats = {"pulls": 0, "bytes": 0, "errors": 0, "pull_s": []}
        ends: dict[int, tuple[float, int]] = {}  # step -> (its end, part bytes through it)
        arrived: dict[int, float] = {}
        written: dict[int, tuple[float, float]] = {}  # step -> parts, statuses written (s)

        seen: dict[int, dict] = {n: {} for n in nodes}  # each helper's status_seen

        def stream() -> None:
            while not stop.is_set():
                t0, c0 = time.monotonic(), time.thread_time()
                written = 0
                positions = receiver.positions()
                for n, folder in nodes.items():
                    frames = read_frames(folder, ranks_of[n], positions, status_seen=seen[n])
                    got = receiver.accept(f"node-{n}", frames, mark=False)
                    stats["bytes"] += got.written_bytes
                    written += got.written_bytes
                    stats["errors"] += len(got.errors)
                receiver.mark_statuses()  # as workloads/cluster_stream.py: once per round
                stats["pulls"] += 1
                stats["pull_s"].append(time.monotonic() - t0)
                if written:  # a pull that carried a step (most pulls find nothing new)
                    stats.setdefault("pull_cpu_s", []).append(time.thread_time() - c0)
                held = sum(v for k, v in receiver.positions().items() if k.startswith("part:"))
                now = time.monotonic()
                for s, (_, need) in list(ends.items()):
                    if s not in arrived and held >= need:
                        arrived[s] = now
                stop.wait(max(0.0, PULL_EVERY_S - (time.monotonic() - t0)))

        # One writer process per node: at each step's end it writes its ranks' parts, then
        # their status files, as the ranks of a job on that node each write their own.
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Queue()
        jobs = {n: ctx.Queue() for n in nodes}
        writers = [ctx.Process(target=node_writer, args=(str(nodes[n]), jobs[n], done),
                               daemon=True) for n in nodes]
        for w in writers:
            w.start()
        reports: dict[int, list[tuple[float, float]]] = {}

        def collect(block: bool) -> None:
            """Take the nodes' reports; a step's parts and statuses are written when every
            node's are."""
            while block and any(len(reports.get(s, ())) < len(nodes) for s in ends) or \
                    not done.empty():
                step, parts_at, status_at = done.get(timeout=60)
                reports.setdefault(step, []).append((parts_at, status_at))
                if len(reports[step]) == len(nodes):
                    end = t_start + (step + 1) * args.step_s
                    ends[step] = (max(p for p, _ in reports[step]), ends[step][1])
                    written[step] = (ends[step][0] - end,
                                     max(s for _, s in reports[step]) - end)

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        mon = subprocess.Popen([sys.executable, "-m", "stragglerlab", "monitor", "--run",
                                str(run), "--no-serve", "--dp", str(dp), "--pp", str(pp),
                                "--window-steps", str(args.window_steps), "--warmup-steps", "0",
                                "--poll", str(args.poll)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rss: list[tuple[float, int]] = []
        t_start = time.monotonic()
        total = 0
        try:
            for step in range(args.steps):
                g = by_step[src_steps[step % len(src_steps)]]
                end_rel = float((g["start_ts"] + g["duration"]).max())
                # The step's last op ends at step_end (the trace clock). A tracer builds its
                # records as the ops run, so they are built before that, and the ranks'
                # writes (each rank its own, at once in a job) follow it. This process
                # builds all 1,024 ranks' (about 0.2 s holding the GIL) half a step before
                # the end: built at the previous step's end, they held up the streamer
                # thread just when it carries that step, which no rank's tracer does.
                step_end = t_start + (step + 1) * args.step_s
                while (early := step_end - args.step_s / 2 - time.monotonic()) > 0:
                    if (kib := rss_kib(mon.pid)) is not None:
                        rss.append((time.monotonic() - t_start, kib))
                    time.sleep(min(1.0, early))
                recs = step_records(g, step_end - end_rel)
                blobs: dict[int, dict[int, bytes]] = {n: {} for n in nodes}
                for rank, rec in recs.items():
                    rec["step"] = step
                    blobs[node_of[rank]][rank] = rec.tobytes()
                total += sum(rec.nbytes for rec in recs.values())
                ends[step] = (step_end, total)  # parts written: corrected as the nodes report
                for n, q in jobs.items():
                    q.put((step, step_end, blobs[n]))
                while time.monotonic() < step_end:
                    if (kib := rss_kib(mon.pid)) is not None:
                        rss.append((time.monotonic() - t_start, kib))
                    time.sleep(min(1.0, max(0.0, step_end - time.monotonic())))
                collect(block=False)
            collect(block=True)
            # As the driver's NodeStreams.stop(): the last step streamed before run.json.
            deadline = time.monotonic() + 60
            while len(arrived) < len(ends) and time.monotonic() < deadline:
                time.sleep(0.05)
            (run / "run.json").write_text("{}")  # the run ended: the monitor finishes and stops
            deadline = time.monotonic() + 600
            mon_cpu = 0.0
            while mon.poll() is None and time.monotonic() < deadline:
                if (kib := rss_kib(mon.pid)) is not None:
                    rss.append((time.monotonic() - t_start, kib))
                try:
                    mon_cpu = cpu_s(mon.pid)
                except (OSError, IndexError):
                    pass
                time.sleep(0.2)
        finally:
            stop.set()
            for q in jobs.values():
                q.put(None)
            for w in writers:
                w.join(timeout=30)
            if mon.poll() is None:
                mon.terminate()
                mon.wait(timeout=30)
        lines = [json.loads(x) for x in (run / "monitor" / "windows.jsonl").read_text()
                 .splitlines() if x.strip()]
    windows = [w for w in lines if w.get("kind") == "window"]
    full = [w for w in windows if len(w["steps"]) == args.window_steps]
    lags = [w["lag_from_step_end_s"] for w in full[:-1] if w["lag_from_step_end_s"] is not None]
    errors = [w["message"] for w in lines if w.get("kind") == "error"]
    stream_lags = [arrived[s] - ends[s][0] for s in sorted(arrived)]
    first_full_t = next((t for t, _ in rss), 0.0) + args.step_s * args.window_steps
    after = [k for t, k in rss if t >= first_full_t] or [k for _, k in rss]
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"| workers (DP x PP) | nodes | steps | windows | stream lag median / max (s) | "
          f"window lag median (s) | window lag max (s) | "
          f"analysis median (s) | monitor RSS first full window / peak / last (MiB) | "
          f"stream pull median (s) | load |  ({time.strftime('%Y-%m-%d')}, "
          f"K = {args.window_steps}, a step every {args.step_s} s)")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {world} ({dp} x {pp}) | {args.nodes} | {args.steps} | {len(windows)} | "
          f"{statistics.median(stream_lags):.3f} / {max(stream_lags):.3f} | "
          f"{statistics.median(lags):.3f} | {max(lags):.3f} | "
          f"{statistics.median(w['analysis_s'] for w in full):.3f} | "
          f"{after[0] / 1024:.0f} / {max(after) / 1024:.0f} / {after[-1] / 1024:.0f} | "
          f"{statistics.median(stats['pull_s']):.3f} | {load} |")
    if len(rss) >= 8:  # the monitor's RSS over the run: flat once its K steps fill
        marks = [rss[int(q / 10 * (len(rss) - 1))] for q in range(1, 11)]
        print("monitor RSS over the run (MiB): " + ", ".join(
            f"{k / 1024:.0f} at {t:.0f} s" for t, k in marks))
    pull_cpu = statistics.median(stats.get("pull_cpu_s") or [0.0])
    print(f"CPU: the stream {pull_cpu:.3f} s per pull that carried records (median, its "
          f"thread's CPU time), the "
          f"monitor {mon_cpu / max(1, len(windows)):.3f} s per window (its whole CPU time "
          f"over {len(windows)} windows, start-up included)")
    after_written = [w["lag_from_step_end_s"] - written[w["step"]][1] for w in full[:-1]
                     if w["lag_from_step_end_s"] is not None and w["step"] in written]
    if after_written:
        print(f"window lag from the last status file written (the stream and the monitor, "
              f"the ranks' writing left out): median "
              f"{statistics.median(after_written):.3f} s, max {max(after_written):.3f} s")
    print(f"the monitor: {statistics.median(w['lag_s'] for w in full):.3f} s median from the "
          "look that found a step complete to its window published (lag_s)")
    parts_s = statistics.median(w[0] for w in written.values())
    status_s = statistics.median(w[1] for w in written.values())
    print(f"the ranks' files, written by one process per node: parts {parts_s:.3f} s, status "
          f"files {status_s:.3f} s after the step's end (median); a step is complete to the "
          "monitor once every status is there")
    print(f"stream: {stats['pulls']} pulls, {stats['bytes'] / 2**20:.1f} MiB, "
          f"{stats['errors']} refused batches; monitor errors: {errors[:3]}; "
          f"lag quartiles {np.percentile(lags, [25, 50, 75]).round(3).tolist()}")
    if len(windows) != args.steps:
        print(f"note: {len(windows)} windows for {args.steps} steps")


if __name__ == "__main__":
    main()
