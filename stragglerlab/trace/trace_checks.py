"""Plausibility checks of a trace that already has the right columns, types and layout.

`stragglerlab.trace.validate.validate_trace` runs these last. They refuse traces that
are well-formed but cannot be a real job's, which would otherwise be analysed
into silent nonsense or allocate memory by the size of a bad number:

* ids in range: `rank` in [0, world_size), `step` in [0, 2**53], `mb_id` >= -1,
  `mc` in [-1, vpp_size), `gmc` in [-1, vpp_size * pp_size); with vpp_size > 1
  the compute ops must use every model chunk (the meta must not contradict the
  trace);
* pipeline ends (vpp_size 1, pp_size > 1): stage 0 neither receives
  activations nor sends gradients back, and the last stage neither sends
  activations nor receives gradients (a trace whose stage column is
  mislabelled would otherwise be simulated against the wrong pipeline);
* `seq_id` of each (step, worker, optype) is 0..count-1, each once: it orders
  an op type on a worker within a step (so a seq_id of 2**40 is refused
  before anything sizes an array by it);
* clocks: `start_ts` in [-MAX_SPAN_S, MAX_START_S] (seconds, one clock), every
  `duration` <= MAX_SPAN_S, a step spans at most MAX_SPAN_S from its first
  start to its last end, and within a (step, worker, optype) the starts do not
  go back as seq_id grows (the one order the schema defines per stream),
  every worker's span of a step overlaps every other's (one job-wide clock), and
  no P2P recv ends before its send starts (data cannot arrive before it is sent:
  a finer view of the same clock, where the spans overlap but are shifted);
* at most MAX_OPS_PER_STEP ops per worker and step;
* not every compute duration is 0 (a job that computes nothing has no
  slowdown to analyse), nor every one of a compute op kind.

Every check is vectorized; each failure is one InputError naming the file, a
few offending rows and the fix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import COMPUTE_OPS, OPTYPE_VALUES, P2P_OPS
from stragglerlab.util.errors import InputError

MAX_SPAN_S = 86_400.0
"""Longest op and longest step, seconds (one day): anything longer is a clock error."""
MAX_START_S = 1e10
"""Latest start_ts accepted, seconds (year 2286 as a Unix time)."""
MAX_STEP = 2**53
"""Largest step number (exact in float64)."""
MAX_OPS_PER_STEP = 100_000
"""Most ops one worker may trace in one step (the reference traces have <= 198)."""
CLOCK_TOLERANCE = 0.01
"""How far past another worker's end of a step a worker may start it, as a share of the
median worker step span (clock rounding; real traces overlap by >= 31 %)."""
ORDER_TOLERANCE_S = 1e-6
"""How far a start may go back as seq_id grows (clock rounding of float32 traces)."""

Rows = Callable[[np.ndarray, str | None], str]


def _fail(path: str, what: str, rows: str, fix: str) -> None:
    raise InputError(f"{what} in {rows}; {fix}", path)


def _range(path: str, rows: Rows, name: str, v: np.ndarray, lo: float, hi: float,
           why: str) -> None:
    if v.dtype.kind == "f":  # float32 values against the bounds in float64, not rounded
        lo, hi = np.float64(lo), np.float64(hi)
    bad = (v < lo) | (v > hi)
    if bad.any():
        _fail(path, f"column '{name}' outside [{lo:g}, {hi:g}] ({why})", rows(bad, name),
              "fix the tracer or drop these rows")


def _codes(names) -> list[int]:
    return [OPTYPE_VALUES.index(n) for n in names]


def _of_kind(opt: np.ndarray, codes: list[int]) -> np.ndarray:
    """Rows whose optype code is one of `codes`: a table lookup (np.isin would sort)."""
    table = np.zeros(len(OPTYPE_VALUES), dtype=bool)
    table[codes] = True
    return table[opt]


def check_plausible(ints: Callable[[str], np.ndarray], floats: Callable[[str], np.ndarray],
                    opt: np.ndarray, cell: np.ndarray, step_idx: np.ndarray,
                    steps: np.ndarray, meta: JobMeta, path: str, rows: Rows) -> None:
    """Raise InputError for the first implausible value (see the module doc).

    Runs after the completeness check (every step holds every worker, each
    (worker, optype) the same number of rows): `step_idx` is each row's dense
    step index into the sorted distinct `steps`. That makes every group below
    a dense range, so nothing here sorts the trace: O(rows).
    """
    world = meta.world_size
    # Each column's values are taken, checked and dropped: on a trace of millions of rows
    # every held row-length copy is tens of MB at the reader's peak.
    _range(path, rows, "rank", ints("rank"), 0, world - 1, f"world_size={world} of the job meta")
    _range(path, rows, "step", ints("step"), 0, MAX_STEP, "training steps count from 0")
    _range(path, rows, "mb_id", ints("mb_id"), -1, MAX_OPS_PER_STEP, "-1 for non-compute ops")
    mc = ints("mc")
    _range(path, rows, "mc", mc, -1, meta.vpp_size - 1, f"vpp_size={meta.vpp_size}")
    compute_codes = _codes(o.value for o in COMPUTE_OPS)
    compute = _of_kind(opt, compute_codes)
    top_chunk = int(mc[compute].max()) if meta.vpp_size > 1 and compute.any() else None
    del mc
    _range(path, rows, "gmc", ints("gmc"), -1, meta.vpp_size * meta.pp_size - 1,
           f"vpp_size*pp_size={meta.vpp_size * meta.pp_size}")
    if top_chunk is not None and top_chunk != meta.vpp_size - 1:
        raise InputError(
            f"the job meta says vpp_size={meta.vpp_size} but the compute ops use model chunks "
            f"(mc) up to {top_chunk}; set vpp_size to the number of chunks the "
            "trace holds (1 without a virtual pipeline)", path)
    _check_pipeline_ends(opt, cell % meta.pp_size, meta, path, rows)

    # At their stored width (float32 stays float32): the bounds below are exact in float32,
    # and the times are widened to float64 (exactly) once put in slot order.
    start, dur = floats("start_ts"), floats("duration")
    _range(path, rows, "start_ts", start, -MAX_SPAN_S, MAX_START_S,
           "seconds on one clock for the whole job")
    _range(path, rows, "duration", dur, 0, MAX_SPAN_S, "seconds; one day at most")
    nopt = len(OPTYPE_VALUES)
    rows_of = np.bincount(opt, minlength=nopt)  # rows of each op type
    timed_of = np.bincount(opt[dur > 0], minlength=nopt)  # of them, taking time
    _check_ops_present(rows_of, compute, cell, dur, meta, path)
    if not timed_of[compute_codes].any():  # compute ops exist: _check_ops_present
        raise InputError("every forward/backward-compute duration is 0: the trace records no "
                         "compute time, so there is nothing to analyse; re-trace with the "
                         "op durations", path)
    for op in COMPUTE_OPS:  # one kind untimed would be idealized and attributed as free
        code = OPTYPE_VALUES.index(op.value)
        if rows_of[code] and not timed_of[code]:
            raise InputError(f"every {op.value} duration is 0 while other compute ops take "
                             "time: that op kind was not timed; re-trace with its durations",
                             path)

    ncell, nsteps = meta.dp_size * meta.pp_size, len(steps)
    # step_idx may be int32: every (step, cell) holds a row (complete), so these products
    # stay under the row count.
    per_cell = np.bincount(step_idx * ncell + cell, minlength=nsteps * ncell)
    if per_cell.max() > MAX_OPS_PER_STEP:
        at = int(np.argmax(per_cell))
        raise InputError(f"{int(per_cell.max()):,} ops in one step of one worker (step "
                         f"{int(steps[at // ncell])}), over the limit of "
                         f"{MAX_OPS_PER_STEP:,}; check the step column (one step per "
                         "training iteration)", path)
    # Groups (step, worker, optype), numbered step-major over the (worker, optype) pairs
    # the trace uses: complete, so ids are dense and each step's groups are contiguous.
    # Row-length index arrays are int32 where the trace allows (half the memory traffic
    # of int64 on the hot path) and dropped as soon as they are used.
    idx = np.int32 if 2 * len(opt) < np.iinfo(np.int32).max else np.int64
    used = np.bincount(cell * nopt + opt, minlength=ncell * nopt) > 0
    pair_idx = (np.cumsum(used) - 1).astype(idx)
    npair = int(used.sum())
    g = pair_idx[cell * nopt + opt]
    g += (step_idx * npair).astype(idx, copy=False)
    count = np.bincount(g, minlength=nsteps * npair)
    offset = (np.cumsum(count) - count).astype(idx)
    # seq_id numbers a group 0..count-1, each once: its row's slot in group order.
    seq = ints("seq_id")
    n = len(g)
    ok = (seq >= 0) & (seq < count[g])
    slot = offset[g]
    np.add(slot, seq, out=slot, where=ok, casting="unsafe")  # < n where ok
    del g
    row_at = np.full(n, -1, dtype=idx)
    in_range = bool(ok.all())
    if in_range:  # every slot in range: a permutation exactly when every slot is filled
        row_at[slot] = np.arange(n, dtype=idx)
    if not in_range or (row_at < 0).any():
        slot[~ok] = n
        taken = np.bincount(slot, minlength=n + 1)[:n]
        bad = ~ok | (taken[np.minimum(slot, n - 1)] > 1)
        raise InputError(
            f"seq_id must number each optype's ops of a worker in a step 0, 1, 2, ... (each "
            f"once), but {rows(bad, 'seq_id')} break that; fix the tracer's seq_id", path)
    del slot, ok
    st = start[row_at].astype(np.float64, copy=False)
    first = np.zeros(n, dtype=bool)
    first[offset[count > 0]] = True
    back_sorted = np.r_[False, ~first[1:] & (st[1:] < st[:-1] - ORDER_TOLERANCE_S)]
    del first
    if back_sorted.any():
        back = np.zeros(n, dtype=bool)
        back[row_at[back_sorted]] = True
        raise InputError(
            f"start_ts goes back as seq_id grows within a worker's optype in one step in "
            f"{rows(back, 'start_ts')}; ops of one type run in seq_id order: fix the clock "
            "or the seq_id of these rows", path)
    del back_sorted
    # Each (step, worker)'s rows are contiguous in slot order (groups are numbered
    # step-major, then worker-major): its first start and last end by reduceat, no
    # scatter; a step's are those of its workers.
    pairs_of_cell = used.reshape(ncell, nopt).sum(axis=1)  # >= 1: every step has every worker
    cell_first = np.cumsum(pairs_of_cell) - pairs_of_cell
    cell_start = offset[(np.arange(nsteps)[:, None] * npair + cell_first[None, :]).ravel()]
    en = dur[row_at].astype(np.float64, copy=False)  # each slot's end
    en += st
    cell_lo = np.minimum.reduceat(st, cell_start).reshape(nsteps, ncell)
    cell_hi = np.maximum.reduceat(en, cell_start).reshape(nsteps, ncell)
    span = cell_hi.max(axis=1) - cell_lo.min(axis=1)
    if (span > MAX_SPAN_S).any():
        s = int(np.argmax(span))
        raise InputError(
            f"step {int(steps[s])} spans {span[s]:.3g} s from its first start to its last "
            f"end, over the {MAX_SPAN_S:.0f} s limit: a clock jumped or a duration is wrong; "
            "fix start_ts/duration or drop the step", path)
    span = _check_one_clock(cell_lo, cell_hi, steps, meta, path)
    if meta.pp_size > 1 and meta.vpp_size == 1:
        send, recv = _p2p_slots(used, count[:npair], offset, npair, nsteps, meta)
        times = st[send], st[recv], en[recv]
        del st, en  # the pairs' own times only: the check's temporaries fit beside the frame
        _check_p2p_order(send, recv, *times, row_at, span, cell, step_idx, steps, meta, path)


def _check_ops_present(rows_of: np.ndarray, compute: np.ndarray, cell: np.ndarray,
                       dur: np.ndarray, meta: JobMeta, path: str) -> None:
    """The ops the method needs: compute on every worker (it idealizes compute: with none,
    every other op would be read as the cost), timed on every worker, and with PP > 1 the
    P2P between stages (without them each stage runs on its own). `rows_of`: the trace's
    row count of each op type (OPTYPE_VALUES order)."""
    if not compute.any():
        raise InputError("the trace holds no forward/backward-compute op: the what-if "
                         "idealizes compute, so there is nothing to analyse; trace the "
                         "training step's compute ops", path)
    ncell = meta.dp_size * meta.pp_size
    compute_cell = cell[compute]
    timed = np.bincount(compute_cell, weights=dur[compute], minlength=ncell)
    has = np.bincount(compute_cell, minlength=ncell) > 0
    untimed = np.flatnonzero(has & (timed <= 0))
    if untimed.size and untimed.size < has.sum():  # all of them: the message below says so
        who = ", ".join(f"(dp_rank {c // meta.pp_size}, stage {c % meta.pp_size})"
                        for c in untimed[:4])
        raise InputError(f"every compute duration of worker(s) {who} is 0 while the others' "
                         "take time: those workers' compute was not timed; re-trace them",
                         path)
    if meta.pp_size > 1 and not rows_of[_codes(o.value for o in P2P_OPS)].any():
        raise InputError(f"the job meta says pp_size={meta.pp_size} but the trace holds no "
                         "P2P send/recv between stages: without them each stage would be "
                         "simulated alone; trace the pipeline's send/recv ops, or set pp_size "
                         "to what the trace holds", path)


def _check_one_clock(lo: np.ndarray, hi: np.ndarray, steps: np.ndarray, meta: JobMeta,
                     path: str) -> float:
    """Every worker's span of a step overlaps every other's; returns the median worker
    step span, s. `lo`, `hi`: [step, worker] first start and last end (workers numbered
    dp_rank * pp_size + stage). A synchronous step couples
    all of them (its DP collectives, its P2P chain), so in one job-wide clock some moment
    lies inside every worker's span; a worker that starts a step after another finished
    it has a clock of its own (an offset rank, corrupted start_ts), and the what-if would
    time the job by it. Measured: the common overlap is at least 31 % of the median
    worker step span on the artifact's samples, the differential traces and dev runs."""
    gap = lo.max(axis=1) - hi.min(axis=1)  # > 0: a worker began after another had ended
    tolerance = CLOCK_TOLERANCE * float(np.median(hi - lo))
    if (gap > tolerance).any():
        s = int(np.argmax(gap))
        late, early = int(np.argmax(lo[s])), int(np.argmin(hi[s]))
        pp = meta.pp_size  # cells are dp_rank * pp_size + stage (validate.py)
        raise InputError(
            f"in step {int(steps[s])} worker (dp_rank {late // pp}, stage {late % pp}) "
            f"starts {gap[s]:.6g} s after worker (dp_rank {early // pp}, stage {early % pp}) "
            "has ended it, but a step's collectives and P2P couple every worker: their "
            "start_ts are not on one clock (a rank's clock offset, or corrupted times); "
            "trace every rank on one job-wide clock", path)
    return float(np.median(hi - lo))


def _p2p_slots(used: np.ndarray, per_step: np.ndarray, offset: np.ndarray, npair: int,
               nsteps: int, meta: JobMeta) -> tuple[np.ndarray, np.ndarray]:
    """Slots (positions in group order) of every P2P pair's send and recv: the k-th
    forward send of (dp_rank, stage) with the k-th forward recv of (dp_rank, stage + 1),
    the k-th backward send with the k-th backward recv of stage - 1, in every step (the
    pairing of stragglerlab.method.p2p_pairs, by seq_id). `used` marks the (worker, optype)
    pairs the trace has, numbered in order; `per_step` is each one's rows per step (the
    same in every step: the completeness check ran first)."""
    nopt, pp = len(OPTYPE_VALUES), meta.pp_size
    index = np.where(used, np.cumsum(used) - 1, -1)
    cells = np.arange(meta.dp_size * pp)
    stage = cells % pp
    sends, recvs = [], []
    for name, peer in (("forward", 1), ("backward", -1)):
        mine = cells[(stage + peer >= 0) & (stage + peer < pp)]
        ps = index[mine * nopt + OPTYPE_VALUES.index(f"{name}-send")]
        pr = index[(mine + peer) * nopt + OPTYPE_VALUES.index(f"{name}-recv")]
        keep = (ps >= 0) & (pr >= 0)
        ps, pr = ps[keep], pr[keep]
        n = np.minimum(per_step[ps], per_step[pr])
        k = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)  # 0..n-1 per pair
        ps, pr = np.repeat(ps, n), np.repeat(pr, n)
        base = np.arange(nsteps)[:, None] * npair
        sends.append((offset[base + ps] + k).ravel())
        recvs.append((offset[base + pr] + k).ravel())
    return np.concatenate(sends), np.concatenate(recvs)


def _check_p2p_order(send: np.ndarray, recv: np.ndarray, send_start: np.ndarray,
                     recv_start: np.ndarray, recv_end: np.ndarray, row_at: np.ndarray,
                     span: float, cell: np.ndarray, step_idx: np.ndarray,
                     steps: np.ndarray, meta: JobMeta, path: str) -> None:
    """No recv ends before its send starts, beyond CLOCK_TOLERANCE of the median worker
    step span: on one clock the data cannot arrive before it is sent. A rank whose clock
    is off by less than a step keeps its spans overlapping (`_check_one_clock`) but
    reverses some pairs, and the what-if would read the shift as waiting. Measured
    (recv end - send start): at least +0.2 ms on every pair of the artifact's two samples
    and of 165 traces with a pipeline, from the differential traces and testbed runs.
    `send`, `recv`: the slots of each pair; `send_start`, `recv_start`, `recv_end`: their
    times, pair by pair; `row_at`: each slot's row."""
    # A recv of no measurable length (a tracer that records the posting only, durations
    # too small to move the clock) says nothing about when its data came.
    timed = recv_end > recv_start
    send, recv = send[timed], recv[timed]
    if not len(send):
        return
    early = send_start[timed] - recv_end[timed]  # > 0: the recv ended first
    i = int(np.argmax(early))
    if early[i] <= CLOCK_TOLERANCE * span:
        return
    pp = meta.pp_size
    send_row, recv_row = int(row_at[send[i]]), int(row_at[recv[i]])
    s_cell, r_cell = int(cell[send_row]), int(cell[recv_row])
    n = int((early > CLOCK_TOLERANCE * span).sum())
    raise InputError(
        f"in step {int(steps[step_idx[send_row]])} a P2P recv on worker (dp_rank "
        f"{r_cell // pp}, stage {r_cell % pp}) ends {early[i]:.6g} s before its send on "
        f"worker (dp_rank {s_cell // pp}, stage {s_cell % pp}) starts ({n} pair(s) like "
        "it): data cannot arrive before it is sent, so these workers' start_ts are not on "
        "one clock (a rank's clock offset, or corrupted times); trace every rank on one "
        "job-wide clock", path)


# P2P op types that cannot occur on the first / last stage of a pipeline without
# interleaving (Megatron's 1F1B: stage 0 has no upstream, the last no downstream).
_NOT_ON_FIRST = ("forward-recv", "backward-send")
_NOT_ON_LAST = ("forward-send", "backward-recv")


def _check_pipeline_ends(opt: np.ndarray, stage: np.ndarray, meta: JobMeta, path: str,
                         rows: Rows) -> None:
    if meta.vpp_size != 1 or meta.pp_size < 2:
        return  # interleaved chunks do pass activations into stage 0 and out of the last
    for where, s, names in (("the first stage (0)", 0, _NOT_ON_FIRST),
                            (f"the last stage ({meta.pp_size - 1})", meta.pp_size - 1,
                             _NOT_ON_LAST)):
        bad = (stage == s) & _of_kind(opt, _codes(names))
        if bad.any():
            raise InputError(
                f"{' / '.join(names)} ops on {where} in {rows(bad, 'optype')}: a pipeline's "
                f"{'first stage has no upstream' if s == 0 else 'last stage has no downstream'}"
                "; check the stage column (stage 0 runs the embedding) or the job meta's "
                "pp_size/vpp_size", path)
