"""Op slices and P2P flow arrows of the Perfetto timeline (analysis/timeline.py).

One op becomes one X slice on its worker's track (a pid per DP x PP worker, a tid per
op stream); a P2P send and the receive it pairs with become one flow arrow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.method.p2p_pairs import p2p_pair_rows

STREAMS: tuple[str, ...] = (
    "compute", "dp-comm", "fwd-send", "fwd-recv", "bwd-send", "bwd-recv", "step-tail", "other",
)
STREAM_OF_OPTYPE: dict[str, str] = {
    "forward-compute": "compute",
    "backward-compute": "compute",
    "params-all-gather": "dp-comm",
    "grads-reduce-scatter": "dp-comm",
    "separate-grads-all-reduce": "dp-comm",
    "forward-send": "fwd-send",
    "forward-recv": "fwd-recv",
    "backward-send": "bwd-send",
    "backward-recv": "bwd-recv",
    "gc": "step-tail",
    "layernorm-grads-all-reduce": "step-tail",
    "embedding-grads-all-reduce": "step-tail",
    "optimizer-clip-main-grad": "step-tail",
    "optimizer": "step-tail",
}


@dataclass
class OpArrays:
    """One frame's op columns as arrays (one entry per row)."""

    dp: np.ndarray
    stage: np.ndarray
    step: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    optype: np.ndarray
    stream: np.ndarray
    seq: np.ndarray
    mb: np.ndarray
    mc: np.ndarray | None

    @classmethod
    def of(cls, frame: pd.DataFrame) -> OpArrays:
        cat = frame["optype"].astype("category").cat
        labels = [str(c) for c in cat.categories]
        codes = cat.codes.to_numpy()
        other_idx = STREAMS.index("other")
        stream_of_code = np.array(
            [STREAMS.index(STREAM_OF_OPTYPE[o]) if o in STREAM_OF_OPTYPE else other_idx
             for o in labels], dtype=np.int64)
        return cls(
            dp=frame["dp_rank"].to_numpy(dtype=np.int64),
            stage=frame["stage"].to_numpy(dtype=np.int64),
            step=frame["step"].to_numpy(dtype=np.int64),
            start=frame["start_ts"].to_numpy(dtype=np.float64),
            dur=np.maximum(frame["duration"].to_numpy(dtype=np.float64), 0.0),
            optype=np.array(labels, dtype=object)[codes],
            stream=stream_of_code[codes],
            seq=frame["seq_id"].to_numpy(dtype=np.int64),
            mb=frame["mb_id"].to_numpy(dtype=np.int64),
            mc=frame["mc"].to_numpy(dtype=np.int64) if "mc" in frame.columns else None,
        )

    def take(self, rows: np.ndarray) -> OpArrays:
        """The ops at `rows`, in that order."""
        return OpArrays(*(None if a is None else a[rows] for a in (
            self.dp, self.stage, self.step, self.start, self.dur, self.optype, self.stream,
            self.seq, self.mb, self.mc)))


@dataclass
class Slices:
    """Op slices ready to write: one entry per X event."""

    ops: OpArrays
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    """Start, us on the file's time axis."""
    dur: np.ndarray
    """Duration, us."""
    step: np.ndarray
    """The `step` arg (for an ideal copy: the traced step it sits beside)."""

    def events(self) -> list[dict]:
        """The X events, ordered by pid, tid and start."""
        order = np.lexsort((self.ts, self.tid, self.pid))
        stp = self.step[order].tolist()
        seq = self.ops.seq[order].tolist()
        mb = self.ops.mb[order].tolist()
        if self.ops.mc is not None:
            args = [{"step": s, "seq_id": q, "mb_id": m, "model_chunk": c}
                    for s, q, m, c in zip(stp, seq, mb, self.ops.mc[order].tolist(),
                                          strict=True)]
        else:
            args = [{"step": s, "seq_id": q, "mb_id": m} for s, q, m in
                    zip(stp, seq, mb, strict=True)]
        cols = (self.ops.optype[order].tolist(), self.pid[order].tolist(),
                self.tid[order].tolist(), self.ts[order].tolist(), self.dur[order].tolist())
        return [{"name": n, "cat": n, "ph": "X", "pid": p, "tid": t, "ts": s, "dur": d,
                 "args": a} for n, p, t, s, d, a in zip(*cols, args, strict=True)]


def op_slices(ops: OpArrays, pp: int, pid_base: int, ts: np.ndarray, step: np.ndarray) -> Slices:
    pid = pid_base + ops.dp * pp + ops.stage
    return Slices(ops, pid, pid * len(STREAMS) + ops.stream, ts,
                   np.round(ops.dur * 1e6, 3), step)


def p2p_pairs_of(ops: OpArrays) -> pd.DataFrame:
    """P2P pairs among `ops` (positions into them)."""
    return p2p_pair_rows(pd.DataFrame({
        "optype": ops.optype, "step": ops.step, "dp_rank": ops.dp, "stage": ops.stage,
        "seq_id": ops.seq}))


def flow_events(sl: Slices, send: np.ndarray, recv: np.ndarray, direction: np.ndarray,
           first_id: int) -> list[dict]:
    """A flow arrow per (send, recv) position pair of `sl`, each end just inside its slice
    (so it binds to it): 's' where the transfer can start (both posted), 'f' (bp='e') at
    the recv's end, where the data has landed; never backwards where the trace is sane."""
    ts, dur = sl.ts, sl.dur
    s0, s_dur, r0, r_dur = ts[send], dur[send], ts[recv], dur[recv]
    inset_s, inset_r = np.minimum(0.05 * s_dur, 1.0), np.minimum(0.05 * r_dur, 1.0)  # us
    land = r0 + r_dur - inset_r
    start = np.clip(np.maximum(s0, r0), s0 + inset_s, s0 + s_dur - inset_s)
    start = np.maximum(s0, np.minimum(start, land))
    start = np.clip(np.round(start, 3), s0, s0 + s_dur)
    land = np.clip(np.round(land, 3), r0, r0 + r_dur)
    events = []
    for k, (s, r, d, a, b) in enumerate(zip(send.tolist(), recv.tolist(), direction.tolist(),
                                            start.tolist(), land.tolist(), strict=True)):
        name, fid = f"{d} p2p", first_id + k
        events.append({"name": name, "cat": "p2p", "ph": "s", "id": fid,
                       "pid": int(sl.pid[s]), "tid": int(sl.tid[s]), "ts": a,
                       "args": {"step": int(sl.step[s]), "seq_id": int(sl.ops.seq[s])}})
        events.append({"name": name, "cat": "p2p", "ph": "f", "bp": "e", "id": fid,
                       "pid": int(sl.pid[r]), "tid": int(sl.tid[r]), "ts": b})
    return events
