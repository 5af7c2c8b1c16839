"""Import per-rank PyTorch profiler (Kineto) Chrome-trace JSON files into our trace schema.

    stragglerlab import kineto --traces DIR|GLOB --out DIR [--layout dp=2,pp=4]
    result = import_kineto(paths, layout=None, timing="auto", allow_partial=False)
    write_trace(result.df, result.meta, "out/trace.parquet")

What is read from each file (gzipped or plain, one file per rank), streamed with bounded
memory by stragglerlab.importers.kineto_events.read_rank(vocabulary=True), the
reader of the general path too; the ranks, steps and clocks are checked by
stragglerlab.importers.rank_checks, as the general path's are:

* `distributedInfo.rank` / `world_size`: which rank the file is;
  `distributedInfo.pg_config` or `--layout`: its DP rank and stage
  (stragglerlab.importers.layout; Megatron rank order);
* `ProfilerStep#N` ranges: the steps (an op belongs to the step its start
  falls in; ops outside every step are left out);
* op types: `record_function(<optype>)` ranges (cat user_annotation) named
  exactly like stragglerlab.trace.schema's vocabulary. Where such ranges nest on a
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
  launched kernels (matched by `External id`), widened to the GPU work that
  threads with no range of their own launched while the range was open on the
  step's thread (autograd's device thread launches a backward pass's kernels:
  vocab_ranges.foreign_gpu_spans); ranges launching no kernel keep their CPU
  span; microseconds -> seconds;
* clocks (`align`): `none` trusts the clocks (baseTimeNanoseconds + ts: right
  when all ranks ran on one host); `collective` shifts each rank by the median,
  over the common steps, of how much later its `optimizer-clip-main-grad` (an
  all-reduce over every rank, which all leave together) ends than rank 0's;
  `step` shifts each rank so its first common ProfilerStep starts with rank
  0's (coarse: ranks start steps tens of ms apart); `auto` (default) = none
  when every trace names the same host_name, else collective (step when no
  rank has the clip op; rank_checks.align_clocks). The offsets applied are
  `result.report["clock_offsets_s"]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.importers.chrome import (  # noqa: F401 (find_traces: re-export)
    check_step_order,
    find_traces,
)
from stragglerlab.importers.kineto_events import (
    VOCAB,
    RankEvents,
    load_ranks,
    vocab_name,
)
from stragglerlab.importers.layout import ORDER_DOC, Layout, from_pg_config
from stragglerlab.importers.rank_checks import (
    align_clocks,
    check_clock_gaps,
    check_layout_world,
    check_ranks,
    common_steps,
    match_tolerance_us,
    resolved_align,
)
from stragglerlab.importers.vocab_ranges import (
    comm_fallback,
    foreign_gpu_spans,
    inside_ranges,
    outermost,
)
from stragglerlab.run.validity import MAX_DISCREPANCY
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.util.errors import InputError

COMPUTE_NAMES = (OpType.FORWARD_COMPUTE.value, OpType.BACKWARD_COMPUTE.value)


@dataclass
class RankTrace:
    """One rank's vocabulary ops, a view of what the streaming reader read of its file
    (stragglerlab.importers.kineto_events.read_rank(vocabulary=True)), microseconds on its
    own clock."""

    events: RankEvents
    """The file as read: rank, world, host, pg_config, base time, steps, ranges."""
    ops: list[tuple[str, float, float, int]]
    """(optype, start, end, kineto tid), by start."""
    gpu_timed: int = 0
    """Ops timed by the GPU span of their range."""

    @property
    def path(self) -> str:
        return self.events.path

    @property
    def rank(self) -> int:
        return self.events.rank

    @property
    def steps(self) -> dict[int, tuple[float, float]]:
        return self.events.steps


@dataclass
class ImportResult:
    """The imported trace, its job meta and what the import did."""

    df: pd.DataFrame
    meta: JobMeta
    report: dict = field(default_factory=dict)


def rank_trace(ev: RankEvents, timing: str, layout_hint=None) -> RankTrace:
    """The vocabulary ops of one rank's file as read (timing 'cpu', 'gpu' or 'auto')."""
    where, v = ev.path, ev.vocab
    if v is None:
        raise ValueError("rank_trace needs read_rank(..., vocabulary=True)")
    if timing == "gpu" and not v.has_kernels:
        raise InputError("--timing gpu, but the trace holds no GPU kernels; use --timing cpu "
                         "(or auto)", where)
    gpu = timing == "gpu" or (timing == "auto" and v.has_kernels)
    ops, gpu_timed = [], 0
    cpu_ops = outermost(v.ranges)  # nesting by the CPU ranges
    other = foreign_gpu_spans(cpu_ops, v.step_tid, v.launches, v.gpu_ops) if gpu else {}
    for i, (name, start, end, tid, ext) in enumerate(cpu_ops):
        if gpu and (ext in v.gpu_spans or i in other):
            spans = [s for s in (v.gpu_spans.get(ext), other.get(i)) if s is not None]
            start, end = min(s[0] for s in spans), max(s[1] for s in spans)
            gpu_timed += 1
        ops.append((name, start, end, tid))
    missing = VOCAB - {o[0] for o in ops}
    if ops and missing:
        ops += comm_fallback(v.comm, missing, ev.rank, layout_hint, inside_ranges(cpu_ops))
    ops.sort(key=lambda r: r[1])
    if not ops:
        raise InputError("no record_function ranges named like the op vocabulary ("
                         + ", ".join(sorted(VOCAB)) + "); wrap each op of the training step "
                         "in torch.profiler.record_function('<optype>') (README: 'Analyzing "
                         "your own training job')", where)
    if not ev.steps:
        raise InputError("no ProfilerStep#N ranges; profile with a schedule and call "
                         "prof.step() once per training step", where)
    check_step_order(ev.steps, where)
    return RankTrace(ev, ops, gpu_timed)


def clip_ends(t: RankTrace, steps: list[int]) -> dict[int, float]:
    """End of the first optimizer-clip-main-grad of each common step on one rank."""
    ends: dict[int, float] = {}
    clip = OpType.OPTIMIZER_CLIP_MAIN_GRAD.value
    for k in steps:
        s0, s1 = t.steps[k]
        hits = [end for name, start, end, _ in t.ops if name == clip and s0 <= start <= s1]
        if hits:
            ends[k] = min(hits)
    return ends


def clock_offsets(traces: list[RankTrace], steps: list[int], align: str) -> tuple[str, dict]:
    """(mode used, microseconds to add to each rank's ts to put it on rank 0's clock), by
    rank_checks.align_clocks on the ends of `optimizer-clip-main-grad` (an all-reduce over
    every rank) per step. `auto` where a trace names no host: collective only if the clip
    all-reduce's members, which leave it together, end further apart than
    match_tolerance_us on the clocks as they are, else none."""
    ref = min(traces, key=lambda t: t.rank)
    ends = {t.rank: clip_ends(t, steps) for t in traces}
    first = {t.rank: t.steps[steps[0]][0] for t in traces}
    one = {t.rank: t.events.base_us - ref.events.base_us for t in traces}
    mode = resolved_align({t.events.host for t in traces}, align)
    if mode != "evidence":
        return align_clocks(mode, ends, first, one)
    used, off = align_clocks("collective", ends, first, one)
    tol = match_tolerance_us([e - s for t in traces for k in steps for s, e in [t.steps[k]]])
    if used == "collective" and any(abs(off[r] - one[r]) > tol for r in off):
        return used, off
    return "none", one  # one clock explains the ends (or nothing to test it on)


def import_kineto(paths: Sequence[str | Path], layout: Layout | None = None,
                  timing: str = "auto", allow_partial: bool = False, align: str = "auto",
                  trial_name: str = "",
                  progress: Callable[[str], None] | None = None,
                  reproduction: Callable[[pd.DataFrame, JobMeta], float] | None = None,
                  max_discrepancy: float = MAX_DISCREPANCY) -> ImportResult:
    """Parse, check and merge per-rank Kineto traces into one schema trace.

    progress: called with `rank trace <i>/<n> parsed: <file>` after each file.

    reproduction: (trace, meta) -> the simulation's discrepancy with the traced durations
    (the what-if's). Given, `timing="auto"` on a trace with kernels takes the timing the
    trace supports: GPU timing (the paper's op times) where its replay reproduces the
    traced step within max_discrepancy, else CPU timing where that one does (ranks that
    share a GPU: each op's GPU span holds its co-tenants' kernels), else GPU timing, which
    the what-if's gate then withholds. `report["timing_evidence"]` holds the readings
    (`tried`; a discrepancy of None: the what-if refused the trace at that timing)."""
    events = load_ranks(paths, progress=progress, vocabulary=True)
    res = _assemble(events, layout, timing, allow_partial, align, trial_name)
    if timing != "auto" or reproduction is None or res.report["timing"] != "gpu":
        return res
    gpu = reproduction(res.df, res.meta)
    evidence = {"tried": ["gpu"], "gpu": _finite(gpu), "cpu": None,
                "max_discrepancy": max_discrepancy, "chosen": "gpu"}
    if not abs(gpu) <= max_discrepancy:
        cpu_res = _assemble(events, layout, "cpu", allow_partial, align, trial_name)
        cpu = reproduction(cpu_res.df, cpu_res.meta)
        evidence["tried"].append("cpu")
        evidence["cpu"] = _finite(cpu)
        if abs(cpu) <= max_discrepancy:
            res, evidence["chosen"] = cpu_res, "cpu"
    res.report["timing_evidence"] = evidence
    return res


def _finite(discrepancy: float) -> float | None:
    """A discrepancy for import.json: None where the what-if refused the trace."""
    return float(discrepancy) if np.isfinite(discrepancy) else None


def _assemble(events: list[RankEvents], layout: Layout | None, timing: str,
              allow_partial: bool, align: str, trial_name: str) -> ImportResult:
    """import_kineto's trace from the files as read, at one timing."""
    hint = layout.coords if layout is not None else None
    traces = [rank_trace(ev, timing, hint) for ev in events]
    world = check_ranks([t.events for t in traces], [], peers=False)
    where = str(Path(traces[0].path).parent)
    if layout is None:
        layout = from_pg_config({t.rank: t.events.pg_config for t in traces}, world, where)
    else:
        check_layout_world(layout, world, where)
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
    steps = common_steps([t.events for t in traces], [], allow_partial)
    align, offsets = clock_offsets(traces, steps, align)
    check_clock_gaps([t.events for t in traces], steps, offsets)
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
        "unfinished_ranges_dropped": int(sum(t.events.vocab.unfinished for t in traces)),
        "respelled_ranges": _respelled(traces),
        "kept_ranks": {str(i): r for i, r in enumerate(kept)},
    }
    return ImportResult(df, meta, report)


def _respelled(traces: list[RankTrace]) -> dict[str, dict]:
    """Range names read as an op type but for spelling -> {op type, count, ranks}."""
    out: dict[str, dict] = {}
    for t in traces:
        for name, n in t.events.vocab.respelled.items():
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
        told = from_pg_config({t.rank: t.events.pg_config for t in traces}, world, where)
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
    from stragglerlab.trace.validate import validate_trace

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
