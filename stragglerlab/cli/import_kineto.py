"""`stragglerlab import kineto`: turn per-rank PyTorch profiler traces into a trace we analyse.

    stragglerlab import kineto --traces run/kineto --out imported [--layout dp=2,pp=2]
    stragglerlab whatif --trace imported/trace.parquet --meta imported/meta.yaml --out wi

Reads one torch.profiler Chrome-trace JSON per rank (gzipped or not; a folder
or a glob) and writes into --out `trace.parquet` (our schema), `meta.yaml`
(the job meta) and `import.json` (schema "stragglerlab.import/1", files,
layout and where it came from, timing, per-rank clock offsets, steps kept);
--out is required (the run folder it makes). Progress with ETA goes to
stderr, the summary to stdout (with --quiet too). The parser is
stragglerlab/importers/kineto.py; README "Analyzing your own training job"
says which record_function names a job needs.

Traces without those names (any torch.distributed job) fall back to the
general op model (stragglerlab/importers/kineto_general.py, docs "Unannotated
traces"): --out then gets `ops.parquet` (stragglerlab.trace.op_model), `import.json`
(with "model": "general" and notes) and `whatif.json` (the what-if on that
model: S, per-step S, attribution to kinds and ranks, M_W, M_S), and the
summary prints S. Which model was used is said on stderr and in import.json.

One GPU rank's trace alone has no what-if (it compares ranks): its steps are replayed with
the host-device model instead (stragglerlab/analysis/host_device.py, docs "Unannotated
traces"); --out gets `import.json` with "model": "host-device" and a "host_device" section,
and the summary prints each step's traced and modelled time and their discrepancy.

--out must be new, empty, or a folder `import` wrote before (its import.json is the
writer's record; a re-import replaces it): another job's trace, meta or records there
are refused, never overwritten, and so is a trace file of --traces that an output would
replace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglerlab.cli.common import (
    examples,
    inputs_not_overwritten,
    not_another_run,
    out_folder,
)
from stragglerlab.util.errors import InputError
from stragglerlab.util.folder_lock import lock_folder

IMPORT_SCHEMA = "stragglerlab.import/1"
"""The `schema` value of import.json."""
VOCABULARY_WRITES = ("trace.parquet", "meta.yaml", "import.json")
"""The files an import with the vocabulary op model writes into --out."""
GENERAL_WRITES = ("ops.parquet", "import.json", "whatif.json")
"""The files an import with the general op model writes into --out."""
TRUTH_WRITES = ("faults.json",)
"""Written (and owned: replaced on a re-import) only with --faults."""


def _truth(args, meta):
    """--faults read and checked against the imported job's layout (None without it)."""
    from stragglerlab.scenarios.faults import read_faults

    if getattr(args, "faults", None) is None:
        return None
    return read_faults(args.faults, meta)


def _owns(writes: tuple[str, ...], truth) -> tuple[str, ...]:
    return writes + (TRUTH_WRITES if truth is not None else ())


def _import_wrote(out) -> bool:
    """Whether `out` holds an earlier import's output: its import.json (the writer's
    record) is ours, so a re-import may replace what it wrote."""
    from stragglerlab.util.errors import InputError
    from stragglerlab.util.filecheck import load_json

    try:
        doc = load_json(out / "import.json", "import.json", "re-import")
    except InputError:  # missing or unreadable: not known to be an import's
        return False
    return isinstance(doc, dict) and doc.get("schema") == IMPORT_SCHEMA


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="import traces of other tools (PyTorch profiler / Kineto)",
                       epilog=examples(
                           "stragglerlab import kineto --traces examples/kineto-dp2-pp2 "
                           "--out /tmp/imported",
                           "stragglerlab import kineto --traces 'run/kineto/rank*.json.gz' "
                           "--layout dp=2,pp=2 --out imported"))
    p.add_argument("format", choices=["kineto"], metavar="FORMAT",
                   help="trace format; one so far: kineto (torch.profiler Chrome-trace JSON, "
                        "one file per rank), as in `stragglerlab import kineto --traces ...`")
    p.add_argument("--traces", required=True, nargs="+", metavar="DIR|GLOB|FILE",
                   help="folder of per-rank traces (*.json, *.json.gz), a glob pattern, or "
                        "the rank trace files themselves (several, as a shell glob gives)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run folder to write (required); writes trace.parquet, meta.yaml, "
                        "import.json")
    p.add_argument("--layout", metavar="dp=N,pp=M[,tp=K]",
                   help="parallel layout in Megatron rank order (rank = (stage*dp + dp_rank)*tp"
                        " + tp_rank); default: from the traces' process groups (pg_config)")
    p.add_argument("--timing", choices=["cpu", "gpu", "auto"], default="auto",
                   help="op spans from CPU ranges or GPU kernels (auto: GPU when the traces "
                        "hold kernels; on annotated traces CPU where only the CPU ranges' "
                        "replay reproduces the traced step within 5%%)")
    p.add_argument("--align", choices=["auto", "none", "collective", "step"], default="auto",
                   help="clock alignment: none = trust the clocks; collective = align the "
                        "ends of the optimizer-clip-main-grad all-reduce (median over steps); "
                        "step = align the first ProfilerStep starts; auto = none when "
                        "all traces come from one host, collective when from several, and "
                        "where a trace names no host, none unless the collectives' members "
                        "do not end together on the clocks as they are")
    p.add_argument("--compute-ideal", choices=["mean", "median"], default="mean",
                   help="unannotated traces: statistic idealizing each compute segment over "
                        "the ranks doing the same work: mean (the paper's) or median (robust "
                        "for jobs with few ranks: one slow rank of 3 or more leaves it clean)")
    p.add_argument("--op-model", choices=["auto", "vocabulary", "general"], default="auto",
                   help="auto: the vocabulary model where the traces carry its "
                        "record_function ranges, else the general one; general: ignore the "
                        "annotations (to compare both on one job); vocabulary: require them")
    p.add_argument("--force", action="store_true",
                   help="unannotated traces: assert the straggling verdict even where the "
                        "simulation does not reproduce the trace (marked FORCED)")
    p.add_argument("--faults", metavar="FILE",
                   help="the traced job's ground truth (a faults.json, as `stragglerlab train` "
                        "writes it; [] for a clean run), checked against the imported ranks "
                        "and written into --out, so `stragglerlab score` scores detectors on "
                        "the import")
    p.add_argument("--allow-partial", action="store_true",
                   help="accept missing steps (keep those every rank has) and missing ranks "
                        "(keep the DP replicas with every stage)")
    return p


def run(args) -> int:
    """Import, write the run folder, print a summary (see the module doc)."""
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.importers.kineto import find_traces
    from stragglerlab.importers.kineto_events import VocabularyFound
    from stragglerlab.importers.kineto_general import load_ranks
    from stragglerlab.importers.layout import Layout

    out = out_folder(args.out)
    lock_folder(out, "import")  # one writer of the folder at a time
    # `--layout ""` is a mistake to report, not the flag left out
    layout = Layout.parse(args.layout) if args.layout is not None else None
    files = find_traces(args.traces)
    # Checked before parsing: a rank trace named like an output (e.g. --traces DIR --out DIR
    # with a rank's trace saved as DIR/import.json) would be replaced by what it became.
    inputs_not_overwritten([("--traces", f) for f in files] + [("--faults", args.faults)], out,
                           VOCABULARY_WRITES + GENERAL_WRITES + TRUTH_WRITES)
    if any(Path(f).resolve().parent == out.resolve() for f in files):
        # Its import.json / whatif.json would sit among the rank traces, and the next
        # import of that folder would read them as rank traces.
        raise InputError(f"--out {out} is the folder of the rank traces; the import's "
                         "outputs would be read as rank traces by the next import of it: "
                         "pass another --out folder (e.g. a sibling)")
    model = getattr(args, "op_model", "auto")
    with Reporter(quiet=args.quiet) as progress:
        parsed = progress.task("rank trace", total=len(files))
        try:
            if model == "vocabulary":
                raise VocabularyFound(str(files[0]))
            events = load_ranks(files, stop_at_vocab=model == "auto", progress=parsed)
        except VocabularyFound:
            progress.log("op model: vocabulary (record_function ranges named like the op "
                         "vocabulary)")
            res = _vocabulary(args, files, layout, out, progress, parsed)
        else:
            if len(events) == 1 and (events[0].kernels.size or events[0].nccl):
                if args.faults is not None:
                    raise InputError("--faults: one rank's trace gets the host-device check "
                                     "only, no what-if or detectors to score; pass every "
                                     "rank's trace, or drop --faults")
                return _host_device(files[0], out, progress)  # one GPU rank: no what-if
            progress.log("op model: general (" + (
                "--op-model general: annotations ignored" if model == "general" else
                "no record_function ranges named like the op vocabulary") +
                ": communication ops and the compute between them)")
            return _general(args, events, layout, out, progress)
    _print_vocabulary(res, out, args.faults is not None)
    return 0


def _vocabulary(args, files, layout, out, progress, parsed):
    from stragglerlab.importers.kineto import import_kineto
    from stragglerlab.scenarios.faults import write_faults
    from stragglerlab.trace.trace_io import write_trace
    from stragglerlab.util.atomic import atomic_write_json, staged_folder

    res = import_kineto(files, layout=layout, timing=args.timing,
                        allow_partial=args.allow_partial, align=args.align, progress=parsed,
                        reproduction=_reproduction(str(out)))
    truth = _truth(args, res.meta)
    progress(f"merged {res.report['ops']:,} ops; writing {out}/")
    not_another_run(out, _owns(VOCABULARY_WRITES, truth), _import_wrote, "import")
    with staged_folder(out, owns=_owns(VOCABULARY_WRITES, truth)) as tmp:  # all or none
        write_trace(res.df, res.meta, tmp / "trace.parquet")
        if truth is not None:
            write_faults(tmp / "faults.json", truth)
        res.meta.dump(tmp / "meta.yaml")
        atomic_write_json(tmp / "import.json", {"schema": IMPORT_SCHEMA, **res.report,
                                                "model": "vocabulary"})
    return res


def _pct(d: float | None) -> str:
    return "so far that the what-if refuses it" if d is None else f"{100 * d:+.2f}%"


def _reproduction(where: str):
    """(trace, meta) -> the what-if's simulation discrepancy; inf where the what-if refuses
    the trace at that timing (the other timing is then tried)."""
    from stragglerlab.analysis.whatif import simulation_discrepancy

    def discrepancy(df, meta) -> float:
        try:
            return simulation_discrepancy(df, meta, where)
        except InputError:
            return float("inf")
    return discrepancy


def _print_vocabulary(res, out, faults: bool) -> None:
    r = res.report
    # The result: stdout, --quiet or not.
    lay = r["layout"]
    print(f"imported {r['ops']:,} ops from {len(r['files'])} rank traces: "
          f"dp={res.meta.dp_size} pp={res.meta.pp_size} tp={lay['tp']} "
          f"(layout from {lay['source']}), steps {r['steps'][0]}..{r['steps'][-1]} "
          f"({len(r['steps'])}), timing {r['timing']}")
    offsets = ", ".join(f"rank {k} {1e3 * v:+.3f} ms" for k, v in r["clock_offsets_s"].items())
    print(f"clock alignment ({r['align']}): {offsets}")
    ev = r.get("timing_evidence")
    if ev is not None and "cpu" in ev["tried"]:
        limit = f"limit ±{100 * ev['max_discrepancy']:.0f}%"
        if ev["chosen"] == "cpu":
            print(f"note: timing cpu: with GPU timing the simulation misses the traced step "
                  f"by {_pct(ev['gpu'])} ({limit}), with the CPU ranges by "
                  f"{_pct(ev['cpu'])}; e.g. ranks that share a GPU have its co-tenants' "
                  "kernels inside each op's GPU span (--timing gpu keeps GPU timing)")
        else:
            print(f"note: neither timing reproduces the trace ({limit}): GPU "
                  f"{_pct(ev['gpu'])}, CPU ranges {_pct(ev['cpu'])}; kept GPU timing, and "
                  "the what-if withholds its verdict")
    if r["unfinished_ranges_dropped"]:
        print(f"left out {r['unfinished_ranges_dropped']} ranges that never closed")
    for name, row in r.get("respelled_ranges", {}).items():
        print(f"note: read {row['count']} range(s) named {name!r} as {row['optype']!r} "
              f"(rank(s) {', '.join(map(str, row['ranks']))}); name them exactly as the "
              "op vocabulary does")
    print(f"wrote {out}/trace.parquet, meta.yaml, import.json"
          + (", faults.json" if faults else ""))


def _general(args, events, layout, out, progress) -> int:
    from stragglerlab.analysis.whatif_general import whatif_general
    from stragglerlab.importers.kineto_general import build_general
    from stragglerlab.run.general_record import whatif_doc
    from stragglerlab.scenarios.faults import write_faults
    from stragglerlab.trace.op_model import OPS_SCHEMA
    from stragglerlab.trace.step_view import layout_of
    from stragglerlab.util.atomic import atomic_write_json, staged_folder
    from stragglerlab.util.errors import InputError
    from stragglerlab.util.filecheck import one_line

    try:
        res = build_general(events, layout=layout, timing=args.timing, align=args.align,
                            allow_partial=args.allow_partial)
        r = res.report
        progress(f"op model: {r['ops']:,} communication ops in {r['groups']:,} cross-rank "
                 "groups; simulating the what-if")
        wi = whatif_general(res.ops, compute_ideal=args.compute_ideal, report=r,
                            force=getattr(args, "force", False))
    except (ValueError, KeyError, IndexError, TypeError) as e:  # a trace shape not foreseen
        raise InputError(f"the general op model could not be built from these traces "
                         f"({type(e).__name__}: {one_line(e, 200)}); please report it with the "
                         "traces' torch version, or annotate the job (docs: 'Analyzing your "
                         "own job')") from None
    notes = res.notes + wi.notes
    try:
        truth = _truth(args, layout_of(res.ops))
    except InputError as e:
        if layout is not None:
            raise
        # The ground truth names workers by (dp_rank, stage); with no --layout the import
        # could not tell the stages (each rank its own DP worker), so say that, not "rerun".
        raise InputError(f"{e}; the import found no pipeline stages in the traces' process "
                         "groups, so a fault named by (dp_rank, stage) may need the "
                         "training's layout: pass --layout dp=N,pp=M") from None
    not_another_run(out, _owns(GENERAL_WRITES, truth), _import_wrote, "import")
    with staged_folder(out, owns=_owns(GENERAL_WRITES, truth)) as tmp:
        res.ops.to_parquet(tmp / "ops.parquet", index=False)
        if truth is not None:
            write_faults(tmp / "faults.json", truth)
        atomic_write_json(tmp / "import.json", {"schema": IMPORT_SCHEMA, **r,
                                                "ops_schema": OPS_SCHEMA, "notes": notes})
        atomic_write_json(tmp / "whatif.json", whatif_doc(wi.to_dict(), notes))
    # The result: stdout, --quiet or not.
    print(f"imported {r['ops']:,} communication ops of {len(r['ranks'])} ranks (world_size "
          f"{r['world_size']}) with the general op model: steps {r['steps'][0]}.."
          f"{r['steps'][-1]} ({len(r['steps'])}), timing {r['timing']}, {r['groups']:,} "
          f"groups matched across ranks, {r['local_ops']:,} local ops"
          + (f", {r['posted_ops']:,} P2P posted ahead" if r.get("posted_ops") else ""))
    offsets = ", ".join(f"rank {k} {1e3 * v:+.3f} ms" for k, v in
                        list(r["clock_offsets_s"].items())[:8])
    print(f"clock alignment ({r['align']}): {offsets}")
    print_general_whatif(wi, notes)
    print(f"wrote {out}/ops.parquet, import.json, whatif.json"
          + (", faults.json" if truth is not None else ""))
    return 0


HOST_DEVICE_WRITES = ("import.json",)
"""The files an import of one GPU rank's trace (the host-device model) writes into --out."""
ONE_RANK = ("the what-if compares ranks; one rank's trace checks the host-device model only; "
            "pass every rank's trace for the what-if")
"""Why an import of one rank's trace stops after the host-device replay."""


def _host_device(path, out, progress) -> int:
    """One GPU rank's trace: replay its steps with the host-device model
    (stragglerlab/analysis/host_device.py), write import.json, print per-step discrepancy."""
    from stragglerlab.analysis.host_device import MAX_DISCREPANCY, simulate_steps
    from stragglerlab.importers.host_device_events import read_host_device
    from stragglerlab.util.atomic import atomic_write_json, staged_folder

    progress.log("op model: host-device (one rank's GPU trace: its host thread and GPU "
                 "streams replayed step by step)")
    trace = read_host_device(path)
    rep = simulate_steps(trace)
    notes = trace.notes + rep.notes
    not_another_run(out, HOST_DEVICE_WRITES, _import_wrote, "import")
    with staged_folder(out) as tmp:
        atomic_write_json(tmp / "import.json", {
            "schema": IMPORT_SCHEMA, "model": "host-device", "files": [str(path)],
            "host_device": rep.to_dict(), "notes": notes, "stopped": ONE_RANK})
    # The result: stdout, --quiet or not.
    for s in rep.steps:
        name = "whole trace" if s.step < 0 else f"step {s.step}"
        print(f"{name}: traced {1e3 * s.traced_s:.3f} ms, model {1e3 * s.simulated_s:.3f} ms, "
              f"discrepancy {100 * s.discrepancy:+.2f}% ({s.classification}: GPU busy "
              f"{s.gpu_busy_share:.0%}, {s.launch_wait_share:.0%} of {s.ops:,} GPU ops start "
              f"as their launch returns, host waits {1e3 * s.sync_wait_s:.3f} ms in "
              f"{s.host_syncs} syncs and {1e3 * s.queue_wait_s:.3f} ms in {s.queue_held} "
              "launches held by the full launch queue)")
    print(f"rank: {rep.classification} (GPU busy {rep.gpu_busy_share:.0%} of the steps, "
          f"{rep.launch_wait_share:.0%} of GPU ops start as their launch returns, the host "
          f"waits for the device {rep.host_wait_share:.0%} of the steps)")
    if not rep.reproduced:
        print(f"the model misses some step by more than {MAX_DISCREPANCY:.0%}: its numbers "
              "for those steps are the model's, not the job's")
    for note in notes:
        print(f"note: {note}")
    print(f"stopped: {ONE_RANK}")
    print(f"wrote {out}/import.json")
    return 0


def print_general_whatif(wi, notes: list[str]) -> None:
    """The summary of a general what-if (`analysis.whatif_general.GeneralWhatIf`) on stdout."""
    from stragglerlab.cli.common import verdict_words

    ideal = "" if wi.compute_ideal == "mean" else f", {wi.compute_ideal} compute ideal"
    model = "" if wi.validity.valid else "the model's "
    print(f"what-if: {model}S = {wi.S:.4f}{ideal} "
          f"({verdict_words(wi.straggling, wi.validity)}; T {1e3 * wi.T:.3f} ms, "
          f"T_ideal {1e3 * wi.T_ideal:.3f} ms, "
          f"traced {1e3 * wi.actual_step_s:.3f} ms, discrepancy {100 * wi.discrepancy:+.2f}%), "
          f"waste {round(100 * wi.waste, 1) + 0.0:.1f}%")
    if banner := wi.validity.banner():
        print(f"  {banner}")
    if wi.host_model:
        print("  model: host and device apart (launches, waits for the device, gating ops)")
    for line in wi.validity.detail[len(wi.validity.reasons):]:
        print(f"  {line}")
    parts = ""
    if wi.by_segment_part:
        parts = (f" (of which host {wi.by_segment_part['host']:.4f}, device "
                 f"{wi.by_segment_part['device']:.4f}; GPU busy "
                 f"{100 * wi.gpu_busy_share:.0f}% of the segments)")
    print("  by kind: " + ", ".join(f"{k} {v:.4f}" + (parts if k == "compute" else "")
                                    for k, v in wi.by_kind.items()))
    top = sorted(wi.by_rank.items(), key=lambda kv: -kv[1])[:8]
    print("  by rank (top): " + ", ".join(f"rank {k} {v:.4f}" for k, v in top))
    if wi.by_stage and wi.stage_balance:
        print("  by stage (the ideal's stages evenly loaded: compute x "
              + ", ".join(f"{f:.2f}" for f in wi.stage_balance.values()) + "): "
              + ", ".join(f"stage {k} {v:.4f}" for k, v in wi.by_stage.items()))
    m_s = "n/a" if wi.M_S is None else f"{wi.M_S:.3f}"
    print(f"  M_W {wi.M_W:.3f} (W = ranks {wi.top_workers}), M_S {m_s}")
    for note in notes:
        print(f"note: {note}")
