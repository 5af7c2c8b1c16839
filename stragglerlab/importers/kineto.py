"""Import per-rank PyTorch profiler (Kineto) Chrome-trace JSON files into our trace schema.

    stragglerlab import kineto --traces DIR|GLOB --out DIR [--layout dp=2,pp=4]
    result = import_kineto(paths, layout=None, timing="auto", allow_partial=False)
    write_trace(result.df, result.meta, "out/trace.parquet")

What is read from each file (gzipped or plain, one file per rank):

* `distributedInfo.rank` / `world_size`: which rank the file is;
  `distributedInfo.pg_config` or `--layout`: its DP rank and stage
  (stragglerlab.importers.layout; Megatron rank order);
* `ProfilerStep#N` ranges: the steps (an op belongs to the step its start
  falls in; ops outside every step are left out);
* op types: `record_function(<optype>)` ranges (cat user_annotation) named
  exactly like stragglerlab.schema's vocabulary. Where such ranges nest on a
  thread the outermost one is the op. P2P ranges (send/recv) may be
  asynchronous (opened at post, closed at completion, possibly on another
  thread), so they overlap other ranges and only drop when inside a range of
  their own type. Ranges that never closed (`"finished": false`) are left
  out. An op type with no range at all on a rank falls back to the
  communication records torch writes (`record_param_comms` with args
  `Collective name`, `Src Rank`/`Dst Rank`, `Process Group Ranks`);
* seq_id = order of the op type on the worker within the step; mb_id = the
  seq_id for forward/backward-compute (1F1B and Megatron's non-interleaved
  schedules run microbatches in order), -1 otherwise; mc = gmc = -1;
* timing: CPU ranges, or with `timing="gpu"` (auto: when the trace holds
  kernels) the `gpu_user_annotation` span Kineto writes for a range that
  launched kernels (matched by `External id`; ranges launching no kernel
  keep their CPU span); microseconds -> seconds;
* clocks (`align`): `none` trusts the clocks (baseTimeNanoseconds + ts: right
  when all ranks ran on one host); `collective` shifts each rank by the median,
  over the common steps, of how much later its `optimizer-clip-main-grad` (an
  all-reduce over every rank, which all leave together) ends than rank 0's;
  `step` shifts each rank so its first common ProfilerStep starts with rank
  0's (coarse: ranks start steps tens of ms apart); `auto` (default) = none
  when every trace names the same host_name, else collective (step when no
  rank has the clip op). The offsets applied are
  `result.report["clock_offsets_s"]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.errors import InputError
from stragglerlab.importers.chrome import (  # noqa: F401 (find_traces: re-export)
    add_step,
    check_rank_doc,
    check_step_order,
    event_problem,
    find_traces,
    load_json,
    one_trace_per_rank,
    step_number,
)
from stragglerlab.importers.kineto_clocks import check_clock_gaps, clock_offsets
from stragglerlab.importers.kineto_events import VOCAB, vocab_name
from stragglerlab.importers.layout import ORDER_DOC, Layout, from_pg_config
from stragglerlab.importers.vocab_ranges import comm_fallback, inside_ranges, outermost
from stragglerlab.meta import MAX_WORKERS, JobMeta
from stragglerlab.schema import OPTYPE_VALUES, OpType

MAX_WORLD = MAX_WORKERS
"""Largest world_size a trace may name (65,536 ranks, the job meta's worker limit): every
rank of the world is checked for a file, so a world_size from a corrupt file must not size
that work (2**32 ran for minutes and filled the memory)."""

COMPUTE_NAMES = (OpType.FORWARD_COMPUTE.value, OpType.BACKWARD_COMPUTE.value)


@dataclass
class RankTrace:
    """What one rank's file holds, in microseconds on its own clock."""

    path: str
    rank: int
    world: int
    host: str
    pg_config: list
    base_us: float
    steps: dict[int, tuple[float, float]]
    ops: list[tuple[str, float, float, int]]  # optype, start, end, kineto tid
    has_kernels: bool
    unfinished: int = 0
    gpu_timed: int = 0
    respelled: dict[str, int] = field(default_factory=dict)
    """Range names read as a vocabulary op type but for case, spaces or `_` -> count."""


@dataclass
class ImportResult:
    """The imported trace, its job meta and what the import did."""

    df: pd.DataFrame
    meta: JobMeta
    report: dict = field(default_factory=dict)


def parse_rank(path: Path, timing: str, layout_hint=None) -> RankTrace:
    """One rank's file -> RankTrace (timing 'cpu', 'gpu' or 'auto')."""
    where = str(path)
    doc = load_json(path)
    check_rank_doc(doc, where)
    info = doc.get("distributedInfo")
    if not isinstance(info, dict) or not isinstance(info.get("rank"), int) \
            or not isinstance(info.get("world_size"), int):
        raise InputError("no distributedInfo with rank and world_size, so the file's rank is "
                         "unknown; profile after torch.distributed.init_process_group (torch "
                         "then writes distributedInfo into every trace)", where)
    world, rank = info["world_size"], info["rank"]
    if not 1 <= world <= MAX_WORLD or not 0 <= rank < world:
        raise InputError(f"distributedInfo says rank {rank} of world_size {world}; need "
                         f"1 <= world_size <= {MAX_WORLD:,} and 0 <= rank < world_size: pass "
                         "traces torch.profiler wrote", where)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    for i, e in enumerate(events):
        if (problem := event_problem(e)) is not None:
            bad = sum(event_problem(x) is not None for x in events)
            raise InputError(f"{bad:,} complete event(s) are malformed, e.g. "
                             f"{str(e.get('name', '?'))[:60]!r} (event #{i}): {problem}; "
                             "pass the profiler's export unedited", where)
    base = doc.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, (int, float)) \
            or not abs(base) < 2.0 ** 63:
        raise InputError(f"baseTimeNanoseconds {str(base)[:40]!r} is not a time in "
                         "nanoseconds; pass the profiler's export unedited", where)
    has_kernels = any(e.get("cat") == "kernel" for e in events)
    if timing == "gpu" and not has_kernels:
        raise InputError("--timing gpu, but the trace holds no GPU kernels; use --timing cpu "
                         "(or auto)", where)
    gpu = timing == "gpu" or (timing == "auto" and has_kernels)
    steps: dict[int, tuple[float, float]] = {}
    ranges, gpu_spans, comm, unfinished = [], {}, [], 0
    respelled: dict[str, int] = {}
    for e in events:
        name, cat = str(e.get("name", "")), e.get("cat")
        if cat in ("user_annotation", "gpu_user_annotation") and name not in VOCAB and \
                (optype := vocab_name(name)) is not None:
            if cat == "user_annotation":
                respelled[name] = respelled.get(name, 0) + 1
            name = optype
        start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
        args = e.get("args") or {}
        if cat == "user_annotation" and name.startswith("ProfilerStep#"):
            add_step(steps, step_number(name, where), start, end, where)
        elif cat == "user_annotation" and name in VOCAB:
            if args.get("finished") is False:
                unfinished += 1
                continue
            ranges.append((name, start, end, e.get("tid", 0), args.get("External id")))
        elif cat == "gpu_user_annotation" and name in VOCAB and "External id" in args:
            gpu_spans[args["External id"]] = (start, end)
        elif "Collective name" in args:
            comm.append(e)
    ops, gpu_timed = [], 0
    cpu_ops = outermost(ranges)  # nesting by the CPU ranges
    for name, start, end, tid, ext in cpu_ops:
        if gpu and ext in gpu_spans:
            start, end = gpu_spans[ext]
            gpu_timed += 1
        ops.append((name, start, end, tid))
    missing = VOCAB - {o[0] for o in ops}
    if ops and missing:
        ops += comm_fallback(comm, missing, info["rank"], layout_hint, inside_ranges(cpu_ops))
    ops.sort(key=lambda r: r[1])
    if not ops:
        raise InputError("no record_function ranges named like the op vocabulary ("
                         + ", ".join(sorted(VOCAB)) + "); wrap each op of the training step "
                         "in torch.profiler.record_function('<optype>') (README: 'Analyzing "
                         "your own training job')", where)
    if not steps:
        raise InputError("no ProfilerStep#N ranges; profile with a schedule and call "
                         "prof.step() once per training step", where)
    check_step_order(steps, where)
    return RankTrace(where, info["rank"], info["world_size"], str(doc.get("host_name", "")),
                     info.get("pg_config") or [], float(base) / 1e3, steps, ops,
                     has_kernels, unfinished, gpu_timed, respelled)


def _check_ranks(traces: list[RankTrace]) -> int:
    one_trace_per_rank([(t.rank, t.path) for t in traces])  # first: none at all is an error
    worlds = {t.world for t in traces}
    if len(worlds) != 1:
        raise InputError(f"the files disagree on world_size ({sorted(worlds)}); pass the "
                         "traces of one job only", traces[0].path)
    return worlds.pop()


def _common_steps(traces: list[RankTrace], allow_partial: bool) -> list[int]:
    sets = {t.rank: set(t.steps) for t in traces}
    everyone = set.intersection(*sets.values())
    union = set.union(*sets.values())
    if not everyone:
        raise InputError("no ProfilerStep#N that every rank has (steps per rank: "
                         + "; ".join(f"rank {r}: {sorted(s)[:8]}" for r, s in sets.items())
                         + "); profile the same steps on every rank")
    if everyone != union and not allow_partial:
        lacking = {r: sorted(union - s) for r, s in sets.items() if union - s}
        raise InputError("ranks miss steps that others have ("
                         + "; ".join(f"rank {r} lacks {s[:8]}" for r, s in lacking.items())
                         + "); use the same profiler schedule on every rank, or pass "
                         "--allow-partial to keep the steps every rank has")
    return sorted(everyone)


def import_kineto(paths: Sequence[str | Path], layout: Layout | None = None,
                  timing: str = "auto", allow_partial: bool = False, align: str = "auto",
                  trial_name: str = "",
                  progress: Callable[[str], None] | None = None) -> ImportResult:
    """Parse, check and merge per-rank Kineto traces into one schema trace.

    progress: called with `rank trace <i>/<n> parsed: <file>` after each file."""
    say = progress or (lambda _msg: None)
    hint = layout.coords if layout is not None else None
    traces = []
    for i, p in enumerate(paths, 1):
        traces.append(parse_rank(Path(p), timing, hint))
        say(f"rank trace {i}/{len(paths)} parsed: {Path(p).name}")
    world = _check_ranks(traces)
    where = str(Path(traces[0].path).parent)
    if layout is None:
        layout = from_pg_config({t.rank: t.pg_config for t in traces}, world, where)
    elif layout.world_size != world:
        raise InputError(f"--layout dp={layout.dp},pp={layout.pp},tp={layout.tp} gives "
                         f"{layout.world_size} ranks but the traces' world_size is {world}; "
                         "fix --layout", where)
    else:
        _layout_agrees(layout, traces, world, where)
    if any(t.rank >= world for t in traces):
        raise InputError(f"a rank is >= world_size {world}; pass the traces of one job", where)
    cells = {}
    for t in traces:
        dp_rank, stage, tp_rank = layout.coords(t.rank)
        if tp_rank == 0:
            cells[(dp_rank, stage)] = t
    traces = list(cells.values())
    dp_keep = list(range(layout.dp))
    missing = [(d, s) for s in range(layout.pp) for d in range(layout.dp) if (d, s) not in cells]
    if missing:
        dp_keep = [d for d in range(layout.dp) if all((d, s) in cells for s in range(layout.pp))]
        text = ", ".join(f"(dp_rank {d}, stage {s})" for d, s in missing[:8])
        if not allow_partial or not dp_keep:
            raise InputError(f"missing ranks: no trace for {len(missing)} of the "
                             f"{layout.dp * layout.pp} DP x PP workers: {text} ({ORDER_DOC}); "
                             "pass every rank's file, or --allow-partial to keep only the DP "
                             "replicas whose every stage is there", where)
        traces = [cells[(d, s)] for d in dp_keep for s in range(layout.pp)]
    steps = _common_steps(traces, allow_partial)
    align, offsets = clock_offsets(traces, steps, align)
    check_clock_gaps(traces, steps, offsets)
    # Ranks numbered in the kept world (the identity when every rank is kept): with
    # --allow-partial the meta's world_size counts the kept ranks only.
    kept = sorted(t.rank for t in traces)  # new rank i is job rank kept[i]
    df = _frame(traces, layout, dp_keep, steps, offsets, {r: i for i, r in enumerate(kept)})
    have = set(df["rank"].unique().tolist())
    empty = [t for t in traces if kept.index(t.rank) not in have]
    if empty:
        raise InputError(f"no op range lies inside the kept ProfilerStep#N ranges (steps "
                         f"{steps[0]}..{steps[-1]}) of rank {empty[0].rank}: its steps have "
                         "zero length or its ops fall outside them; pass the profiler's "
                         "export unedited", empty[0].path)
    meta = JobMeta(dp_size=len(dp_keep), pp_size=layout.pp, tp_size=layout.tp,
                   world_size=len(dp_keep) * layout.pp * layout.tp, trial_name=trial_name)
    _analysable(df, meta, [t.path for t in traces], align)
    report = {
        "files": {str(t.rank): t.path for t in sorted(traces, key=lambda t: t.rank)},
        "layout": {"dp": layout.dp, "pp": layout.pp, "tp": layout.tp, "source": layout.source,
                   "rank_order": ORDER_DOC if layout.source == "--layout" else "pg_config"},
        "timing": "gpu" if any(t.gpu_timed for t in traces) else "cpu",
        "align": align, "clock_offsets_s": {str(t.rank): offsets[t.rank] / 1e6 for t in traces},
        "steps": steps, "dp_ranks_kept": dp_keep, "ops": int(len(df)),
        "unfinished_ranges_dropped": int(sum(t.unfinished for t in traces)),
        "respelled_ranges": _respelled(traces),
        "kept_ranks": {str(i): r for i, r in enumerate(kept)},
    }
    return ImportResult(df, meta, report)


def _respelled(traces: list[RankTrace]) -> dict[str, dict]:
    """Range names read as an op type but for spelling -> {op type, count, ranks}."""
    out: dict[str, dict] = {}
    for t in traces:
        for name, n in t.respelled.items():
            row = out.setdefault(name, {"optype": vocab_name(name), "count": 0, "ranks": []})
            row["count"] += n
            row["ranks"].append(t.rank)
    return out


def _frame(traces, layout: Layout, dp_keep: list[int], steps: list[int],
           offsets: dict[int, float], rank_new: dict[int, int]) -> pd.DataFrame:
    rows = []
    dp_new = {d: i for i, d in enumerate(dp_keep)}
    for t in traces:
        dp_rank, stage, _ = layout.coords(t.rank)
        bounds = sorted((t.steps[k][0], t.steps[k][1], k) for k in steps)
        starts = np.array([b[0] for b in bounds])
        seq: dict[tuple[int, str], int] = {}
        for name, start, end, _tid in t.ops:
            i = int(np.searchsorted(starts, start, side="right")) - 1
            if i < 0 or start > bounds[i][1]:
                continue  # outside every kept step
            step = bounds[i][2]
            s = seq.get((step, name), 0)
            seq[(step, name)] = s + 1
            rows.append((rank_new[t.rank], dp_new[dp_rank], stage, step, name,
                         (start + offsets[t.rank]) / 1e6, max(end - start, 0.0) / 1e6, s,
                         s if name in COMPUTE_NAMES else -1))
    df = pd.DataFrame(rows, columns=["rank", "dp_rank", "stage", "step", "optype", "start_ts",
                                     "duration", "seq_id", "mb_id"])
    df["start_ts"] -= df["start_ts"].min()
    df["mc"] = -1
    df["gmc"] = -1
    df["optype"] = pd.Categorical(df["optype"], categories=list(OPTYPE_VALUES))
    return df.sort_values(["step", "rank", "start_ts"], kind="stable", ignore_index=True)


def _layout_agrees(layout: Layout, traces: list, world: int, where: str) -> None:
    """--layout matches the traces' own process groups where those tell a layout: it is
    for traces whose groups do not (unnamed, missing); against groups that do, a different
    layout maps ranks to stages their P2P ops contradict."""
    try:
        told = from_pg_config({t.rank: t.pg_config for t in traces}, world, where)
    except InputError:
        return  # the groups tell nothing: --layout is the only source
    if (told.dp, told.pp, told.tp) != (layout.dp, layout.pp, layout.tp):
        raise InputError(f"--layout dp={layout.dp},pp={layout.pp},tp={layout.tp} contradicts "
                         f"the traces' process groups (pg_config: dp={told.dp},pp={told.pp},"
                         f"tp={told.tp}); drop --layout to use them", where)


def _analysable(df: pd.DataFrame, meta: JobMeta, files: list[str], align: str) -> None:
    """The merged trace passes the checks every reader runs (validate_trace), or one
    InputError naming the rank traces it came from: an import that writes a trace the
    what-if then refuses points the user at the wrong file. A clock error names the
    alignment that was used and the one to try."""
    from stragglerlab.validate import validate_trace

    try:
        validate_trace(df, meta, "the imported trace")
    except InputError as e:
        folder = str(Path(files[0]).parent) if files else "--traces"
        clocks = ""
        if "one clock" in str(e) and align != "collective":
            clocks = (f"; the clocks were aligned by `{align}`: if the ranks ran on hosts "
                      "whose clocks differ, pass --align collective")
        raise InputError(f"the rank traces do not merge into a trace the what-if can read "
                         f"({e}){clocks}; ranges a tracer left malformed (no ph 'X', no name, "
                         "outside their ProfilerStep, overlapping) are left out, so check "
                         "those: pass the profiler's export unedited", folder) from None
