"""One rank's Kineto trace reduced to what an import path needs, with bounded memory: the
one reader of both (the general op model's, and with vocabulary=True the vocabulary path's).

    ev = read_rank(path)            # RankEvents: steps, communication records, kernels
    evs = load_ranks(paths)         # every rank's, in parallel processes for large inputs

Kept per event kind (everything else is dropped as it streams past):

* `ProfilerStep#N` ranges (any category): the steps;
* NCCL kernels (`cat: kernel`, name containing `nccl`): start, end, stream,
  correlation and the communication args torch writes on them (`Collective
  name`, `Process Group Name`/`Ranks`, `In`/`Out msg nelems`, `Seq`, peers);
* `record_param_comms` CPU ops (gloo and CPU jobs, and the CPU side of NCCL
  calls) with the same args, and `nccl:<op>` / `gloo:<op>` annotation ranges
  (older torch names the collective only there);
* CUDA runtime launches (correlation, start, thread): they tie a kernel to the
  CPU call that launched it, hence to its step and its label;
* other kernels, memcpys and memsets: start, end and their launch's CPU time
  (compute busy time; what a collective's kernel waited for on the GPU);
* backward ops (`autograd::engine::evaluate_function: ...`): start, end and
  thread, the work a thread does while a collective it launched runs (an
  asynchronous collective, e.g. DDP's bucketed all-reduce, overlaps them).

An exact copy of an event read before (same cat, name, pid, tid, ts, dur: a
trace concatenated with itself) is counted in RankEvents.duplicates and adds
no second communication record.

Vocabulary ranges (stragglerlab.trace.schema's optypes) are counted, so the caller
can hand a testbed trace to the vocabulary importer; with stop_at_vocab the
read stops (VocabularyFound) at the first forward-/backward-compute range or
the second distinct vocabulary name (one stray range named `optimizer` in
someone's job does not make it a vocabulary trace).

With vocabulary=True the same stream feeds the vocabulary importer
(stragglerlab.importers.kineto) instead: every event is parsed (no byte-level
skip) and checked as a whole (chrome.event_problem), and RankEvents.vocab
holds the record_function ranges named like the vocabulary, their GPU spans,
torch's communication records and the ProfilerStep ranges; the file must name
its rank in distributedInfo. Both importers thus read a file one way: one
reader, one header, one rank.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import resource
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stragglerlab.importers.chrome import (
    EMPTY_PROFILE,
    MAX_TIME_US,
    add_step,
    check_entry,
    check_step_order,
    dinfo_problem,
    event_problem,
    step_number,
)
from stragglerlab.importers.event_filter import EventSkip
from stragglerlab.importers.stream_json import TraceReader
from stragglerlab.trace.meta import MAX_WORKERS
from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.util.errors import InputError

VOCAB = frozenset(OPTYPE_VALUES) - {OpType.FIRST_OP.value}


def vocab_name(name: str) -> str | None:
    """The vocabulary op type a range's name spells, None if none: the name itself, or the
    name but for case, surrounding spaces and `_` or a space for `-` ('Optimizer',
    ' forward_compute '), so one hand-typed range does not vanish from one rank."""
    if name in VOCAB:
        return name
    near = name.strip().lower().replace("_", "-").replace(" ", "-")
    return near if near in VOCAB else None
COMPUTE_VOCAB = frozenset({OpType.FORWARD_COMPUTE.value, OpType.BACKWARD_COMPUTE.value})
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
UNRANKED = -1
"""RankEvents.rank of a file with no distributedInfo and no rank number in its name."""
COMM_ARGS = ("Collective name", "Process Group Name", "Process Group Ranks", "Seq",
             "In msg nelems", "Out msg nelems", "Src Rank", "Dst Rank", "Group size")
"""Args torch writes on communication records that the op model reads."""
LABEL_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi:", "ucc:")
P2P_LAUNCHES = frozenset({"c10d::send", "c10d::recv_"})
"""Dispatcher ops of a P2P call whose `Concrete Inputs` name the peer (its rank in the
process group the call used), where the profiler recorded shapes."""
COMPUTE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime"})
OLD_CATEGORIES = {"Kernel": "kernel", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy",
                  "Memset": "gpu_memset", "Operator": "cpu_op",
                  "User Annotations": "user_annotation"}
"""Categories of older Kineto traces (torch 1.8-1.9) -> today's names."""
ACTIVITY_PREFIX = "autograd::engine::evaluate_function"
"""CPU ops kept as a thread's activity: every backward op runs inside one, on the thread that
launches the backward's collectives."""
KEPT_CPU_PREFIXES = ("ProfilerStep#", ACTIVITY_PREFIX) + LABEL_PREFIXES
"""CPU ops (cat cpu_op) kept besides record_param_comms."""
SKIP = EventSkip(ph="X", cat="cpu_op", keep_names=KEPT_CPU_PREFIXES,
                 keep_exact=("record_param_comms",))
"""What read_rank's loop drops, dropped before parsing (the loop still checks)."""
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpy", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
              "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
              "hipMemcpy")
"""Runtime calls in which the host waits for the device (a blocking copy included; the
asynchronous copy, `...MemcpyAsync`, is not one)."""
LONG_CALL_US = 10.0
"""A runtime call this long (µs) may have waited for the device (a launch normally takes a
few µs)."""
AT_LAUNCH_TOL_US = 3.0
"""A GPU op that starts within this of its launch call returning (µs) ran as soon as it was
launched: its stream was idle, waiting for the host. A queued op starts when the ops ahead
of it end, ms after its launch in a device-bound job."""
NUMBER = (int, float)
"""Types a time may have (bool excluded: type() is exact)."""


MAX_WORLD = MAX_WORKERS
"""Largest world_size a vocabulary trace may name (65,536 ranks, the job meta's worker
limit): every rank of the world is checked for a file, so a world_size from a corrupt file
must not size that work (2**32 ran for minutes and filled the memory)."""


class VocabularyFound(Exception):
    """Raised inside read_rank(stop_at_vocab=True) at the first vocabulary range."""


@dataclass(kw_only=True)
class CommRecord:
    """One communication record as the trace holds it (microseconds, own clock)."""

    start: float
    """Start, us."""
    end: float
    """End, us."""
    tid: int
    """Thread (CPU records) or stream (kernels)."""
    corr: int
    """Kineto correlation id (kernels), -1 for CPU records."""
    args: dict
    """The COMM_ARGS present."""
    name: str
    """The event's name."""


@dataclass(kw_only=True)
class VocabRanges:
    """What the vocabulary importer reads of one rank's file (read_rank(vocabulary=True)),
    microseconds on the rank's own clock."""

    ranges: list[tuple[str, float, float, object, object]] = field(default_factory=list)
    """(op type, start, end, tid, External id) of the finished CPU ranges named like the
    vocabulary (spelling differences read as the op type they spell), in file order."""
    gpu_spans: dict = field(default_factory=dict)
    """External id -> (start, end) of the GPU spans Kineto writes for such ranges."""
    comm: list[dict] = field(default_factory=list)
    """Events carrying torch's `Collective name` arg (the fallback for op types no range
    names), as read."""
    unfinished: int = 0
    """Ranges that never closed (`"finished": false`), left out."""
    respelled: dict[str, int] = field(default_factory=dict)
    """Range names read as an op type but for case, spaces or `_` -> count."""
    has_kernels: bool = False
    """Whether the file holds GPU kernels."""
    step_tid: object = None
    """The thread of the first ProfilerStep range: the thread that runs the step."""
    launches: tuple[array, array, list] = field(
        default_factory=lambda: (array("d"), array("d"), []))
    """(correlation id, start, tid) of every CUDA runtime/driver call with a correlation id."""
    gpu_ops: tuple[array, array, array] = field(
        default_factory=lambda: (array("d"), array("d"), array("d")))
    """(correlation id, start, end) of every kernel, memcpy and memset on the GPU."""


class _VocabReader:
    """read_rank's event loop with vocabulary=True: VocabRanges, the ProfilerStep ranges in
    file order, and the first malformed complete event (every one is checked whole)."""

    def __init__(self) -> None:
        self.out = VocabRanges()
        self.step_ranges: list[tuple[str, float, float]] = []
        self.seen = self.bad = 0
        self.first_bad: tuple[str, int, str] | None = None

    def add(self, batch: list) -> None:
        out = self.out
        for e in batch:
            if not isinstance(e, dict) or e.get("ph") != "X":
                continue
            i = self.seen
            self.seen += 1
            if (problem := event_problem(e)) is not None:
                self.bad += 1
                if self.first_bad is None:
                    self.first_bad = (str(e.get("name", "?"))[:60], i, problem)
                continue
            if self.bad:
                continue  # refused after the loop: only the count matters now
            name, cat = str(e.get("name", "")), e.get("cat")
            out.has_kernels = out.has_kernels or cat == "kernel"
            kind = OLD_CATEGORIES.get(cat, cat) if type(cat) is str else None
            if kind in COMPUTE_CATS or kind in LAUNCH_CATS:
                corr = (e.get("args") or {}).get("correlation")
                if type(corr) is int:  # a launch and what it put on the GPU share this id
                    ts = float(e["ts"])
                    if kind in LAUNCH_CATS:
                        out.launches[0].append(corr)
                        out.launches[1].append(ts)
                        out.launches[2].append(e.get("tid", 0))
                    else:
                        out.gpu_ops[0].append(corr)
                        out.gpu_ops[1].append(ts)
                        out.gpu_ops[2].append(ts + float(e.get("dur", 0.0)))
            if cat in ("user_annotation", "gpu_user_annotation") and name not in VOCAB and \
                    (optype := vocab_name(name)) is not None:
                if cat == "user_annotation":
                    out.respelled[name] = out.respelled.get(name, 0) + 1
                name = optype
            start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
            args = e.get("args") or {}
            if cat == "user_annotation" and name.startswith("ProfilerStep#"):
                self.step_ranges.append((name, start, end))
                if out.step_tid is None:
                    out.step_tid = e.get("tid", 0)
            elif cat == "user_annotation" and name in VOCAB:
                if args.get("finished") is False:
                    out.unfinished += 1
                    continue
                out.ranges.append((name, start, end, e.get("tid", 0), args.get("External id")))
            elif cat == "gpu_user_annotation" and name in VOCAB and "External id" in args:
                out.gpu_spans[args["External id"]] = (start, end)
            elif "Collective name" in args:
                out.comm.append(e)

    def rank_of(self, head: dict, events: int, where: str) -> tuple[int, int, list]:
        """(rank, world_size, pg_config) from the header, after the checks the vocabulary
        importer makes of a file, in the order it makes them."""
        if not events:
            raise InputError(EMPTY_PROFILE, where)
        info = head.get("distributedInfo")
        if problem := dinfo_problem(info):
            raise InputError(problem, where)
        if not isinstance(info, dict) or not isinstance(info.get("rank"), int) \
                or not isinstance(info.get("world_size"), int):
            raise InputError("no distributedInfo with rank and world_size, so the file's rank "
                             "is unknown; profile after torch.distributed.init_process_group "
                             "(torch then writes distributedInfo into every trace)", where)
        world, rank = info["world_size"], info["rank"]
        if not 1 <= world <= MAX_WORLD or not 0 <= rank < world:
            raise InputError(f"distributedInfo says rank {rank} of world_size {world}; need "
                             f"1 <= world_size <= {MAX_WORLD:,} and 0 <= rank < world_size: "
                             "pass traces torch.profiler wrote", where)
        if self.first_bad is not None:
            name, i, problem = self.first_bad
            raise InputError(f"{self.bad:,} complete event(s) are malformed, e.g. {name!r} "
                             f"(event #{i}): {problem}; pass the profiler's export unedited",
                             where)
        return rank, world, info.get("pg_config") or []

    def steps(self, where: str) -> dict[int, tuple[float, float]]:
        """ProfilerStep number -> CPU range (unordered: the importer checks the order once
        it knows the file holds ops)."""
        steps: dict[int, tuple[float, float]] = {}
        for name, start, end in self.step_ranges:
            add_step(steps, step_number(name, where), start, end, where)
        return steps


@dataclass(kw_only=True)
class RankEvents:
    """What one rank's file holds for the op model, microseconds on its own clock."""

    path: str
    """The file."""
    rank: int
    """Global rank (distributedInfo.rank, else a number in the file name, else UNRANKED)."""
    world: int
    """world_size (distributedInfo; 0 when the file has none)."""
    host: str
    """host_name, '' when absent."""
    pg_config: list
    """distributedInfo.pg_config (process groups), [] when absent."""
    base_us: float
    """baseTimeNanoseconds / 1000."""
    steps: dict[int, tuple[float, float]]
    """ProfilerStep number -> (start, end)."""
    nccl: list[CommRecord]
    """NCCL kernels."""
    cpu_comms: list[CommRecord]
    """record_param_comms ops that carry a Collective name (or none: the op's args)."""
    labels: list[tuple[float, float, int, str]]
    """(start, end, tid, name) of nccl:/gloo:/c10d:: ranges and record_param_comms."""
    launches: np.ndarray
    """(n, 4) float64: correlation, start, tid and end of the CUDA runtime calls that
    launched NCCL kernels."""
    kernels: np.ndarray
    """(n, 4) float64: start, end, CPU launch call start and end (NaN: no launch traced) of
    compute kernels / memcpys / memsets."""
    syncs: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    """(n, 3) float64, by start: start, end and 1 for a sync call (SYNC_CALLS) else 0, of
    the runtime calls on a thread that launches GPU work that are a sync call or last
    LONG_CALL_US or more (a launch that waited for a full queue, an allocation that
    synchronized): the host's candidate waits for the device."""
    activity: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    """(n, 3) float64: start, end, tid of the backward ops (ACTIVITY_PREFIX), by start."""
    vocab_ranges: int = 0
    """Ranges named like the Megatron op vocabulary."""
    events: int = 0
    """Events read."""
    bytes_read: int = 0
    """Decompressed JSON bytes read."""
    peak_rss_mb: float = 0.0
    """Peak resident memory of the reading process when it finished (MiB)."""
    notes: list[str] = field(default_factory=list)
    """What was inferred (e.g. the rank from the file name)."""
    duplicates: int = 0
    """Exact copies of an earlier event (same ph, cat, name, pid, tid, ts, dur) dropped."""
    gpu_launched: int = 0
    """GPU ops (kernels, memcpys, memsets, NCCL kernels) whose launch call is traced."""
    gpu_at_launch: int = 0
    """Of those, the ones that started within AT_LAUNCH_TOL_US of their launch call
    returning: the GPU was waiting for the host (a launch-bound stretch)."""
    vocab: VocabRanges | None = None
    """What the vocabulary importer reads (read_rank(vocabulary=True) only; the fields
    above then hold the file, rank, steps and clock, and no op-model events)."""


def _num(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and abs(v) < MAX_TIME_US


PARALLEL_MIN_BYTES = 16 << 20
"""Files smaller than this in total are read in this process (a pool costs ~0.3 s)."""
MAX_PROCESSES = 8
"""Most reader processes."""


PROGRESS_EVERY_BYTES = 256 << 20
"""read_rank's progress callback hears of every this many decompressed bytes."""


def read_rank(path: Path | str, stop_at_vocab: bool = False, max_bytes: int | None = None,
              max_ratio: float | None = None,
              progress: Callable[[str], None] | None = None,
              vocabulary: bool = False) -> RankEvents:
    """Stream one file into RankEvents (see the module doc); InputError when unusable.
    progress (optional) gets `<file>: <n> MiB read` every PROGRESS_EVERY_BYTES.
    vocabulary: read what the vocabulary importer needs instead (RankEvents.vocab)."""
    path = Path(path)
    where = str(path)
    check_entry(path)  # never open() a FIFO: it blocks
    kw = {k: v for k, v in (("max_bytes", max_bytes), ("max_ratio", max_ratio)) if v}
    reader = TraceReader(path=path, skip=None if vocabulary else SKIP, **kw)
    ranges = _VocabReader() if vocabulary else None
    steps: dict[int, tuple[float, float]] = {}
    nccl, cpu_comms, labels = [], [], []
    launches, kernels, activity = array("d"), array("d"), array("d")
    launch_ends, syncs = array("d"), array("d")
    vocab = bad = 0
    keys, comm_keys = array("q"), set()  # event hashes (copies counted), comm ones seen
    names: set[str] = set()
    first_bad = ""
    next_note = PROGRESS_EVERY_BYTES
    for batch in reader.batches():
        if progress is not None and reader.source.bytes_out >= next_note:
            progress(f"{path.name}: {reader.source.bytes_out >> 20:,} MiB read")
            next_note += PROGRESS_EVERY_BYTES
        if ranges is not None:
            ranges.add(batch)
            continue
        for e in batch:
            if type(e) is not dict or e.get("ph") != "X":
                continue
            cat, name = e.get("cat"), e.get("name")
            cat = OLD_CATEGORIES.get(cat, cat) if type(cat) is str else None  # not a label
            if type(name) is not str or (cat == "cpu_op" and name != "record_param_comms"
                                         and not name.startswith(KEPT_CPU_PREFIXES)):
                continue  # most CPU ops: nothing the model needs
            ts, dur = e.get("ts"), e.get("dur")  # no dur: malformed, not a free op
            if type(ts) not in NUMBER or type(dur) not in NUMBER \
                    or not (-MAX_TIME_US < ts < MAX_TIME_US and 0 <= dur < MAX_TIME_US):
                bad += 1  # also NaN, which fails every comparison
                first_bad = first_bad or f"{name[:60]!r} (ts {str(ts)[:40]}, dur " \
                                         f"{str(dur)[:40]})"
                continue
            end = ts + dur
            # Exact copies (a trace concatenated with itself) are counted; a copy of a
            # communication record would be a second op, so it is skipped. Copies of the
            # rest change nothing: busy time is a union, launches and steps are keyed.
            key = hash((cat, name, _label(e.get("pid")), _label(e.get("tid")), ts, dur))
            keys.append(key)
            if (cat == "kernel" and "nccl" in name.lower() or name == "record_param_comms"
                    or name.startswith(LABEL_PREFIXES)) and _copy(key, comm_keys):
                continue
            args = e.get("args")
            args = args if isinstance(args, dict) else {}
            if cat in COMPUTE_CATS and not (cat == "kernel" and "nccl" in name.lower()):
                corr = args.get("correlation", -1)
                kernels.extend((ts, end, float(corr) if type(corr) is int else -1.0))
                continue
            if cat in LAUNCH_CATS:
                corr = args.get("correlation")
                if isinstance(corr, int):
                    launches.extend((float(corr), float(ts), float(_tid(e))))
                    launch_ends.append(float(end))
                if name in SYNC_CALLS or dur >= LONG_CALL_US:
                    syncs.extend((float(ts), float(end), float(_tid(e)),
                                  float(name in SYNC_CALLS)))
            elif cat == "kernel":
                corr = args.get("correlation", args.get("External id", -1))
                stream = args.get("stream")
                nccl.append(CommRecord(start=ts, end=end,
                                       tid=stream if type(stream) is int else _tid(e),
                                       corr=corr if isinstance(corr, int) else -1,
                                       args={k: args[k] for k in COMM_ARGS if k in args},
                                       name=name))
            elif name.startswith("ProfilerStep#"):
                n = step_number(name, where)
                if cat == "user_annotation":  # the CPU range; a GPU one trails it
                    add_step(steps, n, float(ts), float(end), where)
                else:
                    steps.setdefault(n, (float(ts), float(end)))
            elif name == "record_param_comms":
                rec = CommRecord(start=ts, end=end, tid=_tid(e), corr=-1, name=name,
                                 args={k: args[k] for k in COMM_ARGS if k in args})
                cpu_comms.append(rec)
                labels.append((float(ts), float(end), _tid(e), name, rec.args))
            elif name.startswith(ACTIVITY_PREFIX):
                activity.extend((float(ts), float(end), float(_tid(e))))
            elif name.startswith(LABEL_PREFIXES):
                # A P2P launch's peer: c10d::send(tensors, pg, dstRank, tag) and recv_'s
                # srcRank are scalar args, kept by a profiler run with record_shapes=True.
                ci = args.get("Concrete Inputs") if name in P2P_LAUNCHES else None
                labels.append((float(ts), float(end), _tid(e), name,
                               {"Concrete Inputs": ci} if isinstance(ci, list) else {}))
            elif cat == "user_annotation" and (optype := vocab_name(name)) is not None:
                vocab += 1
                names.add(optype)
                if stop_at_vocab and (optype in COMPUTE_VOCAB or len(names) >= 2):
                    raise VocabularyFound(where)
    if ranges is not None:
        return _vocabulary_events(ranges, reader, where)
    if bad:
        raise InputError(f"{bad:,} complete event(s) are malformed, e.g. {first_bad}: ts and "
                         "dur must be finite numbers of microseconds, dur >= 0; pass the "
                         "profiler's export unedited", where)
    if not reader.events:
        raise InputError(EMPTY_PROFILE, where)
    head = reader.header
    info = head.get("distributedInfo")
    if problem := dinfo_problem(info):  # else a string rank would fall back to the name
        raise InputError(problem, where)
    notes: list[str] = []
    if isinstance(info, dict) and isinstance(info.get("rank"), int) \
            and isinstance(info.get("world_size"), int):
        rank, world = info["rank"], info["world_size"]
    elif m := RANK_IN_NAME.search(path.name):
        rank, world = int(m.group(1)), 0
        notes.append(f"{path.name}: no distributedInfo; rank {rank} taken from the file name")
        info = {}
    else:  # numbered with the other files by kineto_general (name order), or refused there
        rank, world, info = UNRANKED, 0, {}
    if world and not 0 <= rank < world or rank < 0 and rank != UNRANKED:
        raise InputError(f"distributedInfo says rank {rank} of world_size {world}; pass "
                         "traces torch.profiler wrote", where)
    base = head.get("baseTimeNanoseconds", 0)
    base = float(base) / 1e3 if _num(base) or (isinstance(base, int) and abs(base) < 2**63) \
        else 0.0
    check_step_order(steps, where)
    launch = np.frombuffer(launches, dtype=np.float64).reshape(-1, 3)
    kern = np.frombuffer(kernels, dtype=np.float64).reshape(-1, 3).copy()
    nccl_corr = np.fromiter((r.corr for r in nccl), dtype=np.float64, count=len(nccl))
    nccl_start = np.fromiter((r.start for r in nccl), dtype=np.float64, count=len(nccl))
    ends = np.frombuffer(launch_ends, dtype=np.float64)
    launched, at_launch = _at_launch(launch, ends, np.r_[kern[:, 2], nccl_corr],
                                     np.r_[kern[:, 0], nccl_start])
    launch = np.c_[launch, ends]  # correlation, start, tid, end
    corr = kern[:, 2].copy()
    kern = np.c_[kern, _launch_times(launch, corr, col=3)]
    kern[:, 2] = _launch_times(launch, corr)
    sync = np.frombuffer(syncs, dtype=np.float64).reshape(-1, 4)
    work = launch[np.isin(launch[:, 0], np.r_[corr, nccl_corr]), 2]  # threads launching GPU ops
    sync = sync[np.isin(sync[:, 2], work)][:, [0, 1, 3]]
    launch = launch[np.isin(launch[:, 0], nccl_corr)].copy()  # only NCCL launches are needed
    del launches, kernels
    return RankEvents(path=where, rank=rank, world=world, host=str(head.get("host_name", "")),
                      pg_config=info.get("pg_config") or [], base_us=base, steps=steps,
                      nccl=nccl, cpu_comms=cpu_comms, labels=labels,
                      launches=launch,
                      kernels=kern, syncs=sync[np.argsort(sync[:, 0], kind="stable")],
                      activity=_by_start(activity),
                      vocab_ranges=vocab, events=reader.events, notes=notes,
                      bytes_read=reader.source.bytes_out, duplicates=_copies(keys),
                      gpu_launched=launched, gpu_at_launch=at_launch,
                      peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def load_ranks(paths: Sequence[str | Path], stop_at_vocab: bool = False,
               progress: Callable[[str], None] | None = None,
               processes: int | None = None, vocabulary: bool = False) -> list[RankEvents]:
    """read_rank on every file (in the order given), in parallel processes for large
    inputs; progress gets `rank trace <i>/<n> parsed: <file>` as each finishes.
    VocabularyFound propagates; vocabulary: read_rank's vocabulary reading."""
    say = progress or (lambda _m: None)
    paths = [Path(p) for p in paths]
    total = sum(p.stat().st_size for p in paths if p.is_file())
    n = processes if processes is not None else min(len(paths), os.cpu_count() or 1,
                                                    MAX_PROCESSES)
    out: list[RankEvents] = []
    if n <= 1 or len(paths) == 1 or (processes is None and total < PARALLEL_MIN_BYTES):
        for i, p in enumerate(paths, 1):
            out.append(read_rank(p, stop_at_vocab, progress=say, vocabulary=vocabulary))
            say(f"rank trace {i}/{len(paths)} parsed: {p.name}")
        return out
    say(f"reading {len(paths)} traces ({total / 2**20:,.0f} MiB on disk) in {n} processes")
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        futs = {pool.submit(read_rank, p, stop_at_vocab, vocabulary=vocabulary): p
                for p in paths}
        try:
            for i, f in enumerate(as_completed(futs), 1):
                out.append(f.result())
                say(f"rank trace {i}/{len(paths)} parsed: {futs[f].name}")
        except BaseException:
            for f in futs:
                f.cancel()
            raise
    return sorted(out, key=lambda e: paths.index(Path(e.path)))


def _vocabulary_events(ranges: _VocabReader, reader: TraceReader, where: str) -> RankEvents:
    """RankEvents of read_rank(vocabulary=True), after the checks of a vocabulary file."""
    head = reader.header
    rank, world, pg_config = ranges.rank_of(head, reader.events, where)
    base = head.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, (int, float)) \
            or not abs(base) < 2.0 ** 63:
        raise InputError(f"baseTimeNanoseconds {str(base)[:40]!r} is not a time in "
                         "nanoseconds; pass the profiler's export unedited", where)
    empty = np.zeros((0, 4))
    return RankEvents(path=where, rank=rank, world=world, host=str(head.get("host_name", "")),
                      pg_config=pg_config, base_us=float(base) / 1e3,
                      steps=ranges.steps(where), nccl=[], cpu_comms=[], labels=[],
                      launches=empty, kernels=empty, events=reader.events,
                      bytes_read=reader.source.bytes_out, vocab=ranges.out,
                      peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _launch_times(launch: np.ndarray, corr: np.ndarray, col: int = 1) -> np.ndarray:
    """The CPU launch call's start (col 1) or end (col 3) of each correlation id in `corr`
    (NaN where none was traced)."""
    out = np.full(corr.size, np.nan)
    if not launch.size or not corr.size:
        return out
    order = np.argsort(launch[:, 0], kind="stable")
    keys, times = launch[order, 0], launch[order, col]
    i = np.clip(np.searchsorted(keys, corr), 0, keys.size - 1)
    hit = (keys[i] == corr) & (corr >= 0)
    out[hit] = times[i[hit]]
    return out


def _at_launch(launch: np.ndarray, ends: np.ndarray, corr: np.ndarray,
               start: np.ndarray) -> tuple[int, int]:
    """(GPU ops with a traced launch, those that started within AT_LAUNCH_TOL_US of their
    launch call's end) for ops of correlation `corr` starting at `start` (µs)."""
    if not launch.size or not corr.size:
        return 0, 0
    order = np.argsort(launch[:, 0], kind="stable")
    keys, done = launch[order, 0], ends[order]
    i = np.clip(np.searchsorted(keys, corr), 0, keys.size - 1)
    hit = (keys[i] == corr) & (corr >= 0)
    lag = start[hit] - done[i[hit]]
    return int(hit.sum()), int((lag <= AT_LAUNCH_TOL_US).sum())


def _by_start(flat: array) -> np.ndarray:
    """(n, 3) start, end, tid rows, sorted by start."""
    a = np.frombuffer(flat, dtype=np.float64).reshape(-1, 3)
    return a[np.argsort(a[:, 0], kind="stable")].copy()


def _tid(e: dict) -> int:
    t = e.get("tid", 0)
    return t if isinstance(t, int) else hash(str(t)) & 0x7FFFFFFF


def _label(v):
    """A pid or tid as a hashable key part (a JSON list or object would not hash)."""
    return v if isinstance(v, (int, float, str)) else repr(v)


def _copy(key: int, seen: set[int]) -> bool:
    """Whether key was seen before (and remember it)."""
    if key in seen:
        return True
    seen.add(key)
    return False


def _copies(keys: array) -> int:
    """How many event hashes repeat an earlier one."""
    h = np.frombuffer(keys, dtype=np.int64)
    return int(h.size - np.unique(h).size)
