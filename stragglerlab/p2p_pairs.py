"""P2P pairs of a trace and their latency: the one home of pairing a send with its recv.

Injectors measure a slowed link with it (net-delay, net-throttle) and the `whatif`
detector localizes one with it, so both read the same pairs the same way.
Pure pandas/numpy over a trace, no I/O:

    pairs = p2p_pair_latency(trace)          # one row per send/recv pair
    signals = sender_window_signals(pairs, pp, dp, steps, window=3)  # LinkSignals
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def p2p_pair_latency(trace: pd.DataFrame) -> pd.DataFrame:
    """Every P2P pair of the trace with its latency: recv end minus the later of both starts.

    Columns: step, dp_rank, sender_stage, direction, seq_id, latency_s, receiver_waiting
    (the recv was posted before the send: latency is then the whole transfer). The k-th send
    of a stage pairs with the k-th recv of the peer stage (same DP rank and step).
    """
    opt = trace["optype"].astype(str)
    frames = []
    for direction, peer_offset in (("forward", 1), ("backward", -1)):
        sends = trace[opt == f"{direction}-send"][["step", "dp_rank", "stage", "seq_id",
                                                   "start_ts"]]
        recvs = trace[opt == f"{direction}-recv"].assign(
            stage=lambda d, o=peer_offset: d["stage"] - o)  # keyed by the sender's stage
        recvs = recvs.assign(end=recvs["start_ts"] + recvs["duration"])
        pairs = sends.merge(recvs[["step", "dp_rank", "stage", "seq_id", "start_ts", "end"]],
                            on=["step", "dp_rank", "stage", "seq_id"], suffixes=("_s", "_r"))
        latest = pairs[["start_ts_s", "start_ts_r"]].max(axis=1)
        frames.append(pd.DataFrame({
            "step": pairs["step"], "dp_rank": pairs["dp_rank"], "sender_stage": pairs["stage"],
            "direction": direction, "seq_id": pairs["seq_id"],
            "latency_s": pairs["end"] - latest,
            "receiver_waiting": pairs["start_ts_r"] <= pairs["start_ts_s"]}))
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class LinkSignals:
    """Per sender and window of consecutive steps, [pp, dp, window], over its pairs there."""

    share: np.ndarray
    """Share of its pairs slower than their reference pairs' upper quartile (a slow link
    makes nearly all of them so; by chance about a quarter are)."""
    excess_iqr: np.ndarray
    """Its pairs' median latency over the reference median, in the reference's
    interquartile ranges (how far the delay stands out of the timing noise)."""
    excess_s: np.ndarray
    """The same excess in seconds (what the delay costs per pair)."""
    count: np.ndarray
    """How many pairs that is."""


def sender_window_signals(pairs: pd.DataFrame, pp: int, dp: int, steps: np.ndarray,
                          window: int, own_ok: pd.Series | None = None) -> LinkSignals:
    """Per sender and window of `window` consecutive steps (starting at each step), pooled
    over the window's pairs: see `LinkSignals`.

    The reference is made of pairs whose receiver was already waiting (their latency
    is the whole transfer); the sender's own pairs count all (a receiver that came late
    can hide part of a delay, never add one, so a clean sender's late-received pairs
    only look faster, while a throttled sender that blocks in its sends, and so is
    seldom waited for, still shows). own_ok (bool per pair, default all): pairs that may
    count as their sender's own; the others serve only as reference (e.g. pairs whose
    receiver is a slow device, which completes its recvs late by itself).

    The reference of a pair is the same step's pairs of the other senders, and with DP
    peers only those of the same stage and direction: pairs differ by where they sit in
    the pipeline (a stage's forward sends are not its backward sends), so a sender is
    compared with the senders in its place. NaN where a sender has no pair in a window,
    or the run is shorter than `window`.
    """
    n_win = max(len(steps) - window + 1, 0)
    share, excess, excess_s = (np.full((pp, dp, n_win), np.nan) for _ in range(3))
    count = np.zeros((pp, dp, n_win), dtype=np.int64)
    out = LinkSignals(share, excess, excess_s, count)
    in_steps = pairs["step"].isin(steps)
    waiting = pairs[in_steps & pairs["receiver_waiting"]]
    pairs = pairs[in_steps & (True if own_ok is None else own_ok)]
    if waiting.empty or n_win == 0:
        return out
    keys = ["step", "direction", "sender_stage"] if dp > 1 else ["step"]
    # Leave-one-out: with DP peers the senders to leave out are one DP rank's, else a stage's.
    who = "dp_rank" if dp > 1 else "sender_stage"
    for member in pairs[who].unique():
        own = pairs[pairs[who] == member]
        ref = waiting[waiting[who] != member].groupby(keys)["latency_s"]
        q = pd.concat({f"q{int(x * 100)}": ref.quantile(x) for x in (0.25, 0.5, 0.75)},
                      axis=1)
        own = own.join(q, on=keys, how="inner")
        if own.empty:
            continue
        iqr = np.maximum((own["q75"] - own["q25"]).to_numpy(), 1e-6)
        over = (own["latency_s"] > own["q75"]).to_numpy()
        above = (own["latency_s"] - own["q50"]).to_numpy()
        rel = above / iqr
        step_i = np.searchsorted(steps, own["step"].to_numpy())
        sender = own["sender_stage"].to_numpy() * dp + own["dp_rank"].to_numpy()
        for w in range(n_win):  # a handful of windows, each vectorized over the pairs
            inside = (step_i >= w) & (step_i < w + window)
            grouped = pd.DataFrame({"s": sender[inside], "over": over[inside],
                                    "rel": rel[inside], "above": above[inside]}).groupby("s")
            idx = grouped.size().index.to_numpy()
            share[idx // dp, idx % dp, w] = grouped["over"].mean().to_numpy()
            excess[idx // dp, idx % dp, w] = grouped["rel"].median().to_numpy()
            excess_s[idx // dp, idx % dp, w] = grouped["above"].median().to_numpy()
            count[idx // dp, idx % dp, w] = grouped.size().to_numpy()
    return out
