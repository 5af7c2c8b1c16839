"""One rank's communication ops, labelled and placed in steps (general op model).

    frame = comm_frame(ev, timing)     # DataFrame: step, start, end, kind, pg, seq, peer, ...

Where a label comes from, first hit wins:
1. the kernel's (or record's) own args: `Collective name`, `Process Group
   Name`/`Ranks`, `Seq`, `In`/`Out msg nelems`, `Src`/`Dst Rank`;
2. for a kernel, the CPU call that launched it (CUDA runtime event with the
   same correlation): the innermost `record_param_comms` holding args, else the
   innermost `nccl:<op>` range, on that thread around the launch;
3. the kernel name (`ncclDevKernel_AllReduce_...` -> all_reduce,
   `ncclKernel_SendRecv` -> sendrecv).

On CPU traces (timing cpu) the ops are the `record_param_comms` records with a
collective name, or, where a rank has none (older torch), its `gloo:<op>` /
`nccl:<op>` ranges; a send/recv range then takes its `group_peer` (the peer's
rank in the call's process group) from the `c10d::send` / `c10d::recv_`
launch of the same order, where the profiler kept shapes (record_shapes=True),
and starts where that launch did when it ran on the work's own thread: a
blocking gloo send may wait inside its launch for the peer before its
`gloo:send` range opens (16.6 ms seen, the receive completing meanwhile).

Step: the ProfilerStep holding the launch (GPU) or the record's start (CPU).

Asynchronous ops (CPU traces, `gloo:<op>` work ranges): `beside` is how long
the thread that launched the op (its `c10d::<op>` launch, the latest one that
started before the work did, on another thread) computed while the op ran:
its backward ops (RankEvents.activity) that started after the launch, clipped
to the op's span; NaN where the trace shows neither. kineto_general pools it
over the ops doing the same work to call them async (DDP's bucketed
all-reduce: backward goes on) or waited for (FSDP's gathers, a plain
`dist.all_reduce`: the thread waits).
"""

from __future__ import annotations

import bisect
import enum
import functools
import re
from collections.abc import Iterator

import numpy as np
import pandas as pd

from stragglerlab.importers.kineto_events import P2P_LAUNCHES, CommRecord, RankEvents
from stragglerlab.trace.op_model import CommKind

ALIASES = {
    "allreduce": CommKind.ALL_REDUCE, "allreduce_coalesced": CommKind.ALL_REDUCE,
    "all_reduce_coalesced": CommKind.ALL_REDUCE,
    "allgather": CommKind.ALL_GATHER, "all_gather_base": CommKind.ALL_GATHER,
    "allgather_base": CommKind.ALL_GATHER, "all_gather_into_tensor": CommKind.ALL_GATHER,
    "allgather_into_tensor_coalesced": CommKind.ALL_GATHER,
    "allgather_coalesced": CommKind.ALL_GATHER,
    "reducescatter": CommKind.REDUCE_SCATTER, "reduce_scatter_base": CommKind.REDUCE_SCATTER,
    "reduce_scatter_tensor": CommKind.REDUCE_SCATTER,
    "reduce_scatter_tensor_coalesced": CommKind.REDUCE_SCATTER,
    "reducescatter_base": CommKind.REDUCE_SCATTER,
    "alltoall": CommKind.ALL_TO_ALL, "alltoall_base": CommKind.ALL_TO_ALL,
    "all_to_all_single": CommKind.ALL_TO_ALL,
    "isend": CommKind.SEND, "irecv": CommKind.RECV, "recv_any_source": CommKind.RECV,
}
KERNEL_RE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
NO_STEP = -1


class LabelSource(str, enum.Enum):
    """Where an op's kind came from."""

    ARGS = "args"
    CPU_CALL = "cpu_call"
    ANNOTATION = "annotation"
    KERNEL_NAME = "kernel_name"


def normalize(name: str) -> str:
    """torch's collective name -> a CommKind value (or the cleaned name)."""
    n = name.strip().lower()
    for pre in ("nccl:", "gloo:", "c10d::", "mpi:", "ucc:"):
        if n.startswith(pre):
            n = n[len(pre):]
    n = n.strip("_").rstrip("_")
    if n in {k.value for k in CommKind}:
        return n
    if n in ALIASES:
        return ALIASES[n].value
    n2 = n.replace("_", "")
    for key, kind in ALIASES.items():
        if key.replace("_", "") == n2:
            return kind.value
    for kind in CommKind:
        if kind.value.replace("_", "") == n2:
            return kind.value
    return n or "comm"


def _kernel_kind(name: str) -> str:
    m = KERNEL_RE.search(name)
    return normalize(m.group(1)) if m else "comm"


class _Labels:
    """Innermost label range around (ts, tid)."""

    def __init__(self, labels: list):
        self.by_tid: dict[int, tuple[list, list]] = {}
        for lab in sorted(labels, key=lambda x: x[0]):
            starts, items = self.by_tid.setdefault(lab[2], ([], []))
            starts.append(lab[0])
            items.append(lab)

    def around(self, ts: float, tid: int) -> tuple[dict, str] | None:
        """(args of the innermost record_param_comms with a Collective name, or {}, name of
        the innermost nccl:/gloo: range) around ts on tid; None when neither."""
        starts, items = self.by_tid.get(tid, ((), ()))
        i = bisect.bisect_right(starts, ts) - 1
        args, name = None, None
        for j in range(i, max(i - 64, -1), -1):
            s, e, _tid, nm, a = items[j]
            if e < ts:
                continue
            if args is None and a.get("Collective name"):
                args = a
            if name is None and nm != "record_param_comms":
                name = nm
            if args is not None and name is not None:
                break
        if args is None and name is None:
            return None
        return args or {}, name or ""


MAX_RANK_DIGITS = 10
"""Digits of the longest rank number a process group's ranks string may hold (ranks are
32-bit): a longer one marks the string as damaged, not a group of real ranks."""


def _int(v, default: int = -1) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _peer(kind: str, args: dict, rank: int) -> int:
    if kind not in (CommKind.SEND.value, CommKind.RECV.value, CommKind.SEND_RECV.value):
        return -1
    key = "Dst Rank" if kind == CommKind.SEND.value else "Src Rank"
    p = _int(args.get(key))
    if p >= 0 and p != rank:
        return p
    ranks = args.get("Process Group Ranks")
    if isinstance(ranks, str):
        ranks = _ranks_in(ranks)
    if isinstance(ranks, (list, tuple)) and len(ranks) == 2 and rank in ranks:
        return int(ranks[0] if ranks[1] == rank else ranks[1])
    return -1


@functools.lru_cache(maxsize=1024)
def _ranks_in(text: str) -> tuple[int, ...]:
    """The ranks a "Process Group Ranks" string lists, in its order; none where it holds
    a number no rank can be (read as a group that names no ranks). Every op of a group
    carries the same string, as long as the group (the world, for a data-parallel
    all-reduce), so it is parsed once: per op it made the import quadratic in the ranks."""
    digits = re.findall(r"-?\d+", text)
    if any(len(d) > MAX_RANK_DIGITS for d in digits):
        return ()
    return tuple(int(d) for d in digits)


@functools.lru_cache(maxsize=1024)
def _members_in(text: str) -> tuple[int, ...]:
    """_ranks_in, sorted."""
    return tuple(sorted(_ranks_in(text)))


def _pg(args: dict) -> tuple[str, tuple[int, ...]]:
    ranks = args.get("Process Group Ranks")
    if isinstance(ranks, str):
        members = _members_in(ranks)
    else:
        members = tuple(sorted(int(r) for r in ranks if isinstance(r, int))) \
            if isinstance(ranks, list) else ()
    name = args.get("Process Group Name")
    key = str(name) if name not in (None, "") else (",".join(map(str, members)) if members
                                                     else "")
    return key, members


def comm_frame(ev: RankEvents, use_gpu: bool) -> pd.DataFrame:
    """The rank's communication ops (see the module doc), sorted by start, with the step
    each belongs to (NO_STEP: outside every ProfilerStep)."""
    labels = _Labels(ev.labels)
    rows = []
    if use_gpu:
        launch = {int(c): (t, int(tid)) for c, t, tid in ev.launches[:, :3]} \
            if len(ev.launches) else {}
        for rec in ev.nccl:
            cpu_ts, tid = launch.get(rec.corr, (rec.start, None))
            args, source = rec.args, LabelSource.ARGS
            kind = normalize(str(args["Collective name"])) if args.get("Collective name") \
                else None
            if kind is None and tid is not None and (hit := labels.around(cpu_ts, tid)):
                cargs, nm = hit
                if cargs:
                    args, kind, source = {**cargs, **args}, normalize(
                        str(cargs["Collective name"])), LabelSource.CPU_CALL
                elif nm:
                    kind, source = normalize(nm), LabelSource.ANNOTATION
            if kind is None:
                kind, source = _kernel_kind(rec.name), LabelSource.KERNEL_NAME
            rows.append(_row(ev.rank, rec, cpu_ts, kind, args, source))
    else:
        for rec in ev.cpu_comms:
            if not rec.args.get("Collective name"):
                continue
            rows.append(_row(ev.rank, rec, rec.start, normalize(str(rec.args["Collective name"])),
                             rec.args, LabelSource.ARGS))
        if not rows:  # older torch: only the gloo:<op> / nccl:<op> ranges name them
            # A gloo call shows twice: the dispatcher's `c10d::<op>` launch and the
            # backend's `gloo:<op>` work (on its worker thread for async ops); the work
            # is the op, the launch a duplicate that would be matched on its own.
            backend = any(name.startswith(("gloo:", "nccl:")) for *_x, name, _a in ev.labels)
            labels = sorted(ev.labels, key=lambda x: x[0])
            launch_peers = _launch_peers(labels) if backend else {}
            launch_of = _Launches(labels, ev.activity) if backend else None
            for start, end, tid, name, _a in labels:
                if backend and name.startswith("c10d::"):
                    continue
                if name != "record_param_comms":
                    kind = normalize(name)
                    peer, at, on = next(launch_peers.get(kind, iter(())), (None, start, None))
                    if on == tid and at < start:  # its launch waited on this thread
                        start = at
                    args = {} if peer is None else {"Group peer": peer}
                    rec = CommRecord(start=start, end=end, tid=tid, corr=-1, args={}, name=name)
                    beside = launch_of.beside(start, end, tid) if launch_of else np.nan
                    rows.append(_row(ev.rank, rec, start, kind, args, LabelSource.ANNOTATION,
                                     beside))
    cols = ["cpu_ts", "start", "end", "kind", "pg", "members", "seq", "peer", "in_nelems",
            "out_nelems", "source", "stream", "group_peer", "beside"]
    df = pd.DataFrame(rows, columns=cols)
    df["beside"] = df["beside"].astype(float)  # an empty frame's columns are objects
    df["step"] = _steps_of(ev.steps, df["cpu_ts"].to_numpy(dtype=float))
    return df.sort_values(["start", "end"], kind="stable", ignore_index=True)


def _row(rank: int, rec: CommRecord, cpu_ts: float, kind: str, args: dict,
         source: LabelSource, beside: float = np.nan) -> tuple:
    pg, members = _pg(args)
    return (float(cpu_ts), float(rec.start), float(rec.end), kind, pg, members,
            _int(args.get("Seq")), _peer(kind, args, rank), _int(args.get("In msg nelems")),
            _int(args.get("Out msg nelems")), source.value, rec.tid, _int(args.get("Group peer")),
            float(beside))


class _Launches:
    """Which work ranges of one rank ran while their launching thread computed (module doc)."""

    def __init__(self, labels: list, activity: np.ndarray):
        launches = [(s, t) for s, _e, t, name, _a in labels if name.startswith("c10d::")]
        self.start = np.array([s for s, _t in launches], dtype=float)
        self.tid = np.array([t for _s, t in launches], dtype=np.int64)
        self.by_tid = {}
        for t in np.unique(activity[:, 2]).tolist() if len(activity) else []:
            a = activity[activity[:, 2] == t]
            self.by_tid[int(t)] = (a[:, 0], a[:, 1])

    def beside(self, start: float, end: float, tid: int) -> float:
        """How long work [start, end] on thread tid ran beside its launching thread's
        compute (µs); NaN where no launch, or no activity on its thread, is traced."""
        i = int(np.searchsorted(self.start, start, side="right")) - 1
        while i >= 0 and self.tid[i] == tid:  # a launch on the work's own thread ran inline
            i -= 1
        if i < 0 or int(self.tid[i]) not in self.by_tid:
            return float("nan")
        a_start, a_end = self.by_tid[int(self.tid[i])]
        # Only ops that began after the launch: one that holds the launch (the hook that
        # launched it, or a wrapper waiting for it) says nothing of the time after.
        lo = int(np.searchsorted(a_start, self.start[i], side="right"))
        hi = int(np.searchsorted(a_start, end, side="left"))
        if hi <= lo or end <= start:
            return 0.0
        s = np.maximum(a_start[lo:hi], start)
        e = np.minimum(a_end[lo:hi], end)
        e = np.maximum.accumulate(np.maximum(e, s))  # nested ops counted once
        s = np.maximum(s, np.r_[start, e[:-1]])
        return float(np.clip(e - s, 0.0, None).sum())


def _launch_peers(labels: list) -> dict[str, Iterator[tuple[int, float, int]]]:
    """Per P2P kind, (peer, start, thread) of this rank's `c10d::send` / `c10d::recv_`
    launches in the order of `labels` (sorted by start): the peer is the rank within the
    call's process group, from `Concrete Inputs`, -1 where the profiler kept no shapes.
    The backend's `gloo:send` / `gloo:recv` work of the k-th launch is the k-th of its
    kind: one rank issues its P2P calls in order."""
    out: dict[str, list[tuple[int, float, int]]] = {}
    for s, _e, tid, name, args in labels:
        if name not in P2P_LAUNCHES:
            continue
        ci = args.get("Concrete Inputs")
        peer = ci[2] if isinstance(ci, list) and len(ci) > 2 else ""
        out.setdefault(normalize(name), []).append(
            (int(peer) if isinstance(peer, str) and peer.isdigit() else -1, float(s), tid))
    return {kind: iter(launches) for kind, launches in out.items()}


def _steps_of(steps: dict[int, tuple[float, float]], ts: np.ndarray) -> np.ndarray:
    """The ProfilerStep holding each time, NO_STEP outside all."""
    if not steps or not ts.size:
        return np.full(ts.size, NO_STEP, dtype=np.int64)
    ks = sorted(steps, key=lambda k: steps[k][0])
    starts = np.array([steps[k][0] for k in ks])
    ends = np.array([steps[k][1] for k in ks])
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = (i >= 0) & (ts <= ends[np.maximum(i, 0)])
    return np.where(ok, np.asarray(ks)[np.maximum(i, 0)], NO_STEP)
