"""`stragglerlab whatif`: run the what-if analysis of one trace.

    stragglerlab whatif --trace T.parquet --meta M.yaml --out DIR [--timelines]
    stragglerlab whatif --run results/slow-worker-1/0        # -> results/slow-worker-1/0/whatif
    stragglerlab whatif --run DIR --ray-address HOST:PORT --ray-workers 8   # replays on Ray

The one step of the workflow that analyses a trace: it computes the what-if
once and writes into DIR `whatif.json` (our field names, see README; the
top-level keys use --compute-ideal, `compute_ideals` holds both the mean and
the median ideal, plus what the `whatif` detector and the figures read, see
stragglerlab/run/results.py), `artifact-format/{result,mw,ms}.json` in the
OSDI'25 artifact's own layout and, with --timelines, `timeline.json.gz` and
`ideal-timeline.json.gz` (Perfetto); a rerun removes those of these names it
did not write again (OUTPUTS). Prints a short summary to stdout (with --quiet
too), progress to stderr. The Fig. 14 heatmap is a figure (`stragglerlab
figures --only fig14_heatmaps`), drawn from whatif.json.

With --ray-address the replays (over half the run's CPU at 16,384 workers) run on a
Ray cluster's cores, the steps split over --ray-workers actors
(stragglerlab/whatif_ray.py); whatif.json is the same bit for bit.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from stragglerlab.cli.common import (
    defaulted_run,
    examples,
    finish_killed,
    inputs_not_overwritten,
    not_another_record,
    out_folder,
    run_out,
)
from stragglerlab.scenarios.scenario_limits import host_cores
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.errors import InputError
from stragglerlab.util.folder_lock import lock_folder

# Timelines of huge traces keep their first steps only: a timeline is for looking at,
# and writing millions of JSON events would cost more than the whole analysis.
MAX_TIMELINE_EVENTS = 100_000

OUTPUTS = ("whatif.json", "artifact-format/result.json", "artifact-format/mw.json",
           "artifact-format/ms.json", "timeline.json.gz", "ideal-timeline.json.gz")
"""Every file the verb may write into --out: a rerun removes those it did not write again."""
WHATIF_SCHEMAS = ("stragglerlab.whatif/", "stragglerlab.whatif-general/")
"""Records a whatif.json of ours may hold and a rerun may replace."""


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="what-if analysis of a trace (slowdown, attribution, M_W, M_S)",
                       epilog=examples(
                           "stragglerlab whatif --run examples/slow-worker   # -> "
                           "examples/slow-worker/whatif/",
                           "stragglerlab whatif --trace trace.parquet --meta meta.yaml "
                           "--out results/job1 --timelines",
                           "stragglerlab whatif --run results/big --ray-address HOST:6379 "
                           "--ray-workers 32   # replays on a Ray cluster"))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="FILE", help="trace parquet file")
    src.add_argument("--run", metavar="DIR",
                     help="run folder: its trace.parquet and meta.yaml")
    p.add_argument("--meta", metavar="FILE",
                   help="job meta YAML (default: the run folder's, else the meta in the parquet)")
    p.add_argument("--out", metavar="DIR",
                   help="output folder; writes whatif.json and "
                        "artifact-format/{result,mw,ms}.json, with --timelines also "
                        "timeline.json.gz and ideal-timeline.json.gz, and removes those of an "
                        "earlier run it did not write again (default: RUN/whatif with --run; "
                        "required with --trace)")
    p.add_argument("--timelines", action="store_true",
                   help="also write Perfetto timelines of the traced and the ideal job")
    p.add_argument("--compute-ideal", choices=["mean", "median"], default="mean",
                   help="statistic idealizing compute ops: mean (the paper's) or median "
                        "(robust for jobs with few workers)")
    p.add_argument("--ideal-window", metavar="N", type=int,
                   help="also idealize within windows of N steps (a job that changes regime "
                        "within its trace, held against an ideal of its own regime): each "
                        "window's S and per-step S in whatif.json `ideal_windows` and the "
                        "notes; the cross-step ideal stays the result")
    p.add_argument("--force", action="store_true",
                   help="assert the straggling verdict even where the simulation does not "
                        "reproduce the trace within 5%% (the paper's cut); marked FORCED")
    p.add_argument("--threads", metavar="N", type=int, default=default_threads(),
                   help="replay threads in this process, one step part each (default: "
                        "this machine's CPUs, at most 2); whatif.json is the same bit for "
                        "bit with any number")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="run the replays on a Ray cluster's cores: its head's HOST:PORT (or "
                        "auto), or 'local' for a Ray started on this machine; the trace is "
                        "read here and the steps split over the workers; whatif.json is the "
                        "same bit for bit (needs the train extra)")
    p.add_argument("--ray-workers", metavar="N", type=int,
                   help="Ray workers with --ray-address, one step part and one CPU each "
                        "(default: one per CPU of the cluster, at most one per step)")
    return p


MAX_DEFAULT_THREADS = 2
"""Default replay threads at most: the replays overlap in their array work and serialize
in the interpreter between ops, so threads beyond two gain little on any machine."""


def default_threads() -> int:
    """This process's cores (scenario_limits.host_cores), at most MAX_DEFAULT_THREADS."""
    return max(1, min(MAX_DEFAULT_THREADS, host_cores()))


def _ray_checks(args) -> None:
    """--ray-address / --ray-workers: each mistake one InputError, before the trace is
    read (an unreachable head is found by one TCP connect, not by Ray's minutes of retry)."""
    if args.ray_address is None:
        if args.ray_workers is not None:
            raise InputError("--ray-workers needs --ray-address (the Ray cluster, or 'local')")
        return
    from stragglerlab.whatif_ray import LOCAL, import_ray
    from stragglerlab.workloads.placement import check_ray_address, check_ray_reachable

    if args.ray_workers is not None and args.ray_workers < 1:
        raise InputError(f"--ray-workers {args.ray_workers}: give at least 1")
    address = args.ray_address.strip()
    if address != LOCAL:
        address = check_ray_address(address)
    import_ray()
    if address != LOCAL:
        check_ray_reachable(address)
    args.ray_address = address


def run(args) -> int:
    """Analyse, write every output, print the summary."""
    from stragglerlab.analysis.replays import ThreadReplays
    from stragglerlab.analysis.whatif import ComputeIdeal, ideal_timeline, run_whatif
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.run.artifact_format import fix_json, result_json
    from stragglerlab.run.general_record import is_general_import
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.trace.trace_io import read_trace_table
    from stragglerlab.util.atomic import staged_folder

    _ray_checks(args)  # flags first: a mistake there leaves no --out folder behind
    if args.threads < 1:
        raise InputError(f"--threads {args.threads}: give at least 1")
    if args.ideal_window is not None and args.ideal_window < 1:
        raise InputError(f"--ideal-window {args.ideal_window}: give a window of at least 1 "
                         "step")
    defaulted = None  # the --run folder whose default --out is used
    if args.run is not None:
        if not args.run.strip():
            raise InputError("--run is empty; name a run folder (trace.parquet and meta.yaml)")
        run_dir = Path(args.run)
        finish_killed(run_dir, args.quiet)
        if is_general_import(run_dir):
            if args.ray_address is not None or args.ray_workers is not None:
                raise InputError("--ray-address splits an op-level trace's replays; an "
                                 "unannotated import's what-if runs in one process: drop "
                                 "--ray-address", str(run_dir))
            if args.ideal_window is not None:
                raise InputError("--ideal-window windows the op-level what-if; an "
                                 "unannotated import's what-if names a regime change in its "
                                 "notes instead: drop --ideal-window", str(run_dir))
            return _general(args, run_dir)
        if not run_dir.is_dir():
            raise InputError("no such folder; --run names a run folder (trace.parquet and "
                             "meta.yaml, e.g. a run, import kineto or synth output)",
                             str(run_dir) or "''")
        args.trace = str(run_dir / "trace.parquet")
        if args.meta is None and RunFolder(path=run_dir).has_meta:  # a dangling link: refused
            args.meta = str(run_dir / "meta.yaml")  # else the meta written into the parquet
        defaulted = defaulted_run(args.out, args.run)
        args.out = run_out(args.out, args.run, "whatif")
    elif args.trace is not None and not args.trace.strip():
        raise InputError("--trace is empty; name the trace's .parquet file")
    elif not args.out:
        raise InputError("whatif --trace needs --out DIR (the output folder)")
    if args.meta is not None and not args.meta.strip():
        raise InputError("--meta is empty; name the job meta YAML, or leave --meta out to "
                         "use the one written into the trace")
    out = out_folder(args.out, default_of=defaulted)
    lock_folder(out, "whatif")  # one writer of the folder at a time
    # Before the work: an input named like an output (ow/whatif.json) would be replaced.
    inputs_not_overwritten([("--trace", args.trace), ("--meta", args.meta)], out, OUTPUTS)
    not_another_record(out / "whatif.json", WHATIF_SCHEMAS, "a what-if result")
    # A few stages, each one line (a trace of any size is analysed in seconds): no live display.
    progress = Reporter(quiet=args.quiet, live=False)

    # The trace's columns alone (no pandas in the process unless a file needs parsing).
    df, meta = read_trace_table(args.trace, args.meta, compact_ints=True)
    progress(f"read {len(df):,} ops from {args.trace}")
    # Every compute ideal at once (one graph, one frame): figures and detectors read them
    # from whatif.json instead of re-analysing the trace.
    with contextlib.ExitStack() as stack:
        replays = stack.enter_context(ThreadReplays(args.threads))
        if args.ray_address is not None:
            from stragglerlab.whatif_ray import RayReplays

            replays = stack.enter_context(RayReplays(address=args.ray_address,
                                                     workers=args.ray_workers, say=progress))
        wr = run_whatif(df, meta, where=str(args.trace), progress=progress,
                        compute_ideal=ComputeIdeal(args.compute_ideal),
                        other_ideals=list(ComputeIdeal), replays=replays,
                        ideal_window=args.ideal_window)
        if args.ray_address is not None:
            progress("ray workers: " + "; ".join(
                f"{c.node_ip} pid {c.pid} {c.n_steps} steps, CPU {c.cpu_s:.2f} s, peak "
                f"{c.peak_rss_mib:.0f} MiB" for c in replays.costs()))
    result = wr.result
    for r in (result, *result.variants.values()):
        r.force = args.force
    name = meta.trial_name or Path(args.trace).stem
    doc = result.to_json()  # built once: whatif.json and the summary read the same document
    with staged_folder(out, owns=OUTPUTS) as tmp:  # every output or none; stale ones removed
        atomic_write_json(tmp / "whatif.json", doc)
        atomic_write_json(tmp / "artifact-format" / "result.json", result_json(result))
        atomic_write_json(tmp / "artifact-format" / "mw.json", fix_json(result.m_w, "Mw"))
        atomic_write_json(tmp / "artifact-format" / "ms.json", fix_json(result.m_s, "Ms"))
        if args.timelines:
            from stragglerlab.analysis.timeline import write_perfetto  # opt-in: imported here

            # One file: the traced job and the simulated ideal beside it (a copy of the ideal
            # step at the start of each traced step), P2P flow arrows, S per step as a
            # counter. ideal-timeline.json.gz, the ideal alone, stays as in the artifact.
            ideal = ideal_timeline(wr)
            write_perfetto(first_steps(df.to_frame(), MAX_TIMELINE_EVENTS),
                           tmp / "timeline.json.gz",
                           title=f"{name} (traced and simulated ideal)",
                           max_events=MAX_TIMELINE_EVENTS, pp_size=meta.pp_size, ideal=ideal,
                           step_slowdown=result.step_slowdown())
            write_perfetto(ideal, tmp / "ideal-timeline.json.gz",
                           title=f"{name} (simulated ideal)", max_events=MAX_TIMELINE_EVENTS,
                           pp_size=meta.pp_size)
    progress("wrote whatif.json, artifact-format/" + (", timelines" if args.timelines else ""))
    print(summary(result, out, doc))  # the result: stdout, --quiet or not
    return 0


def _general(args, run_dir: Path) -> int:
    """An unannotated import (`import kineto` with the general op model): the what-if of its
    op table again, written to its whatif.json (or --out/whatif.json)."""
    import numpy as np

    from stragglerlab.analysis.whatif_general import whatif_general
    from stragglerlab.cli.import_kineto import print_general_whatif
    from stragglerlab.run.general_record import OPS_PARQUET, whatif_doc
    from stragglerlab.trace.ops_table import read_ops
    from stragglerlab.util.filecheck import load_json

    if args.timelines:
        raise InputError("the timelines are drawn from the op-level trace, which an "
                         "unannotated import does not have; drop --timelines", str(run_dir))
    again = f"re-import the traces (`stragglerlab import kineto --traces ... --out {run_dir}`)"
    path = run_dir / OPS_PARQUET
    ops = read_ops(path, again)
    report = {}
    if (run_dir / "import.json").is_file():
        doc = load_json(run_dir / "import.json", "import.json", again)
        report = doc if isinstance(doc, dict) else {}
    try:
        wi = whatif_general(ops, compute_ideal=args.compute_ideal, report=report,
                            force=args.force)
    except (ValueError, KeyError, IndexError, TypeError, ZeroDivisionError) as e:
        raise InputError(f"the op table could not be simulated ({type(e).__name__}: "
                         f"{str(e)[:160]}); {again}", str(path)) from None
    if not all(np.isfinite(v) and v > 0 for v in (wi.S, wi.T, wi.T_ideal)):
        raise InputError(f"the op table simulates to S = {wi.S} (T {wi.T} s, T_ideal "
                         f"{wi.T_ideal} s); {again}", str(path))
    notes = []
    if report:
        raw = report.get("notes")
        notes = [n for n in raw if isinstance(n, str)] if isinstance(raw, list) else []
    notes = list(dict.fromkeys(notes + wi.notes))
    out = out_folder(args.out or str(run_dir), default_of=None if args.out else run_dir)
    lock_folder(out, "whatif")
    inputs_not_overwritten([("--run", run_dir / OPS_PARQUET),
                            ("--run", run_dir / "import.json")], out, ["whatif.json"])
    not_another_record(out / "whatif.json", WHATIF_SCHEMAS, "a what-if result")
    atomic_write_json(out / "whatif.json", whatif_doc(wi.to_dict(), notes))
    print_general_whatif(wi, notes)  # the result: stdout, --quiet or not
    print(f"wrote {out}/whatif.json")
    return 0


def first_steps(df, max_rows: int):
    """The rows of the first steps of df holding at most max_rows rows (at least one step)."""
    counts = df["step"].value_counts().sort_index()
    n_steps = max(1, int((counts.cumsum() <= max_rows).sum()))
    if n_steps == len(counts):
        return df
    return df[df["step"].isin(counts.index[:n_steps])]


def _outside_unit(result) -> list[str]:
    """A note for M_W or M_S outside [0, 1], which reads as a share and is not bounded as one:
    (T - T_rem) / (T - T_ideal) passes 1 when idealizing those ops alone beats the ideal job
    (T_rem < T_ideal: the mean ideal counts the stragglers' slow ops, so the other workers
    run faster than it), and goes under 0 when idealizing them slows the job (their own
    ops ran faster than the ideal)."""
    out = []
    for name, m in (("M_W", result.m_w), ("M_S", result.m_s)):
        if m.rem > 1.0:
            out.append(f"  note                {name} {m.rem:.3f} > 1: idealizing those ops "
                       f"alone gives {1e3 * m.t_rem:.1f} ms, under the ideal job's "
                       f"{1e3 * m.t_ideal:.1f} ms (the mean ideal counts the stragglers' "
                       "slow ops); the paper's formula, kept as is")
        elif m.rem < 0.0:
            out.append(f"  note                {name} {m.rem:.3f} < 0: idealizing those ops "
                       f"slows the job to {1e3 * m.t_rem:.1f} ms from {1e3 * m.t_ori:.1f} ms "
                       "(they ran faster than the ideal); the paper's formula, kept as is")
    return out


def summary(result, out: Path, doc: dict | None = None) -> str:
    """A short human summary of the what-if result. `doc` is its `to_json()` document
    when the caller has built it already (at DP 1,024 building it costs as much as the
    summary's whole rest)."""
    from stragglerlab.cli.common import verdict_words

    j = result.to_json() if doc is None else doc
    validity = result.validity
    lines = [
        f"what-if: {result.job_meta.trial_name or 'job'} "
        f"(dp={result.job_meta.dp_size}, pp={result.job_meta.pp_size}, "
        f"{len(result.steps)} steps, {result.n_ops:,} ops)",
        f"  slowdown S          {result.slowdown:.3f}   "
        f"({verdict_words(j['straggling'], validity)}, threshold 1.1)",
        f"  waste               {round(100 * result.waste, 1) + 0.0:.1f}% of resources",
        f"  step time           actual {j['t_actual_s']:.4f}s, simulated {j['t_nodelay_s']:.4f}s,"
        f" ideal {j['t_ideal_s']:.4f}s",
        f"  sim. discrepancy    {100 * (result.simulation_discrepancy - 1):+.2f}% "
        "(paper drops jobs above 5%)",
    ]
    if banner := validity.banner():
        lines.append(f"  {banner}")
    top_types = sorted(j["slowdown_by_optype"].items(), key=lambda kv: -kv[1])[:3]
    lines.append("  top op types        " + ", ".join(f"{k} {v:.3f}" for k, v in top_types))
    workers = ", ".join(
        f"(DP {w['dp_rank']}, PP {w['stage']}) "
        f"{result.worker_score[w['stage'], w['dp_rank']]:.3f}" for w in j["top_workers"][:6]
    ) + (f" and {len(j['top_workers']) - 6} more (whatif.json)" if len(j["top_workers"]) > 6
         else "")
    lines.append(f"  top workers         {workers}")
    if j["straggling"]:
        lines.append(f"  M_W                 {result.m_w.rem:.3f} (add {result.m_w.add:.3f})")
        lines.append(f"  M_S (last stage)    {result.m_s.rem:.3f} (add {result.m_s.add:.3f})")
        lines += _outside_unit(result)
    else:  # shares of a waste near 0: a ratio of two small differences, noise over noise
        lines.append("  M_W, M_S            n/a (shares of the waste of a straggling job, "
                     "S >= 1.1; whatif.json keeps the values)")
    if result.fwd_bwd_correlation is not None:
        lines.append(f"  fwd-bwd correlation {result.fwd_bwd_correlation:.3f} "
                     "(>= 0.9: sequence-length imbalance)")
    lines += [f"  note                {note}" for note in result.notes]
    lines.append(f"  outputs in          {out}/")
    return "\n".join(lines)
