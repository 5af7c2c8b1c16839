"""P2P pairs of a trace and their latency: the one home of pairing a send with its recv.

Injectors measure a slowed link with it (net-delay, net-throttle) and the `whatif`
detector localizes one with it, so both read the same pairs the same way.
Pure pandas/numpy over a trace, no I/O:

    pairs = p2p_pair_latency(trace)          # one row per send/recv pair
    rows = p2p_pair_rows(trace)              # their send and recv row positions
    signals = sender_window_signals(pairs, pp, dp, steps, window=3)  # LinkSignals
    signals = worker_window_signals(pairs, pp, dp, steps, window=3)  # sent or received
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def p2p_pair_rows(trace: pd.DataFrame) -> pd.DataFrame:
    """Every P2P pair of the trace as the row positions (`iloc`) of its send and its recv.

    Columns: direction ('forward' or 'backward'), send_row, recv_row, step, dp_rank,
    sender_stage, seq_id. The k-th send of a stage pairs with the k-th recv of the peer
    stage (same DP rank and step): a forward send of stage p with the forward recv of
    stage p + 1, a backward send with the backward recv of stage p - 1 (same seq_id).
    """
    opt = trace["optype"].astype(str).to_numpy()
    keys = trace[["step", "dp_rank", "stage", "seq_id"]].reset_index(drop=True)
    frames = []
    for direction, peer_offset in (("forward", 1), ("backward", -1)):
        send_pos = np.flatnonzero(opt == f"{direction}-send")
        recv_pos = np.flatnonzero(opt == f"{direction}-recv")
        sends = keys.iloc[send_pos].assign(send_row=send_pos)
        recvs = keys.iloc[recv_pos].assign(recv_row=recv_pos)
        recvs = recvs.assign(stage=recvs["stage"] - peer_offset)  # keyed by the sender's stage
        pairs = sends.merge(recvs, on=["step", "dp_rank", "stage", "seq_id"])
        frames.append(pd.DataFrame({
            "direction": direction, "send_row": pairs["send_row"],
            "recv_row": pairs["recv_row"], "step": pairs["step"],
            "dp_rank": pairs["dp_rank"], "sender_stage": pairs["stage"],
            "seq_id": pairs["seq_id"]}))
    return pd.concat(frames, ignore_index=True)


def p2p_pair_latency(trace: pd.DataFrame) -> pd.DataFrame:
    """Every P2P pair of the trace with its latency: recv end minus the later of both starts.

    Columns: step, dp_rank, sender_stage, direction, seq_id, latency_s, receiver_waiting
    (the recv was posted before the send: latency is then the whole transfer). Pairs as
    `p2p_pair_rows`.
    """
    rows = p2p_pair_rows(trace)
    send, recv = rows["send_row"].to_numpy(), rows["recv_row"].to_numpy()
    start = trace["start_ts"].to_numpy()
    end = start + trace["duration"].to_numpy()
    return pd.DataFrame({
        "step": rows["step"], "dp_rank": rows["dp_rank"], "sender_stage": rows["sender_stage"],
        "direction": rows["direction"], "seq_id": rows["seq_id"],
        "latency_s": end[recv] - np.maximum(start[send], start[recv]),
        "receiver_waiting": start[recv] <= start[send]})


def receiver_stage(pairs: pd.DataFrame) -> np.ndarray:
    """The stage each pair's recv ran on: the sender's next (forward) or previous stage."""
    return (pairs["sender_stage"] + np.where(pairs["direction"] == "forward", 1, -1)).to_numpy()


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

    @classmethod
    def empty(cls, pp: int, dp: int, n_win: int) -> LinkSignals:
        """NaN signals and zero counts: no pair measured yet."""
        return cls(*(np.full((pp, dp, n_win), np.nan) for _ in range(3)),
                   np.zeros((pp, dp, n_win), dtype=np.int64))


def sender_window_signals(pairs: pd.DataFrame, pp: int, dp: int, steps: np.ndarray,
                          window: int, own_ok: pd.Series | None = None,
                          informative: bool = False) -> LinkSignals:
    """Per sender and window of `window` consecutive steps (starting at each step), pooled
    over the window's pairs: see `LinkSignals`.

    The reference is made of pairs whose receiver was already waiting (their latency
    is the whole transfer); the sender's own pairs count all (a receiver that came late
    can hide part of a delay, never add one, so a clean sender's late-received pairs
    only look faster, while a throttled sender that blocks in its sends, and so is
    seldom waited for, still shows). informative: of the pairs whose receiver came late,
    count only those that are slow all the same: a late receiver's fast pair hides what
    the link did (a delayed first stage of 1F1B is waited for on one microbatch of four).
    own_ok (bool per pair, default all): pairs that may count as their sender's own; the
    others serve only as reference (e.g. pairs whose receiver is a slow device, which
    completes its recvs late by itself).

    The reference of a pair is the same step's pairs of the other senders, and with DP
    peers only those of the same stage and direction: pairs differ by where they sit in
    the pipeline (a stage's forward sends are not its backward sends), so a sender is
    compared with the senders in its place. NaN where a sender has no pair in a window,
    or the run is shorter than `window`.
    """
    out, n_win, waiting, pairs = _start(pairs, pp, dp, steps, window, own_ok)
    if out is None:
        return LinkSignals.empty(pp, dp, n_win)
    q = _leave_one_out_quantiles(waiting["latency_s"].to_numpy(), *_place(waiting, steps, pp, dp),
                                 *_place(pairs, steps, pp, dp), (0.25, 0.5, 0.75))
    owner = pairs["sender_stage"].to_numpy() * dp + pairs["dp_rank"].to_numpy()
    _pool_windows(out, owner, np.searchsorted(steps, pairs["step"].to_numpy()),
                  pairs["latency_s"].to_numpy(), q, dp, n_win, window,
                  pairs["receiver_waiting"].to_numpy() if informative else None)
    return out


def worker_window_signals(pairs: pd.DataFrame, pp: int, dp: int, steps: np.ndarray,
                          window: int, own_ok: pd.Series | None = None,
                          informative: bool = False) -> LinkSignals:
    """Per worker [stage, dp] and window, pooled over the pairs it sends *or receives*.

    A throttled veth (tc, both ways) slows every pair that passes the worker's link, so
    nearly all of them stand out, while its neighbours have clean pairs too; a sender-side
    delay slows only half of them (`sender_window_signals` sees that one). Reference of a
    pair, as seen by a worker (receiver-waiting pairs, as for senders):

    * with DP peers: the same step's pairs of the other DP ranks in its place;
    * pure PP: the same step's pairs that touch neither the worker (with three or more
      stages there are some: a throttled inner stage slows its two links, not the third);
    * pure PP with two stages, where every pair touches both workers: the pairs of the
      quietest window (lowest median latency) of the run. Both workers then measure the
      same: the trace cannot tell which end of the one link is slow, and a slow link that
      lasts the whole run has no reference at all.

    own_ok and informative: as for `sender_window_signals`.
    """
    out, n_win, waiting, pairs = _start(pairs, pp, dp, steps, window, own_ok)
    if out is None:
        return LinkSignals.empty(pp, dp, n_win)
    ends = (pairs["sender_stage"].to_numpy(), receiver_stage(pairs))
    step_i = np.searchsorted(steps, pairs["step"].to_numpy())
    latency = pairs["latency_s"].to_numpy()
    waited = pairs["receiver_waiting"].to_numpy() if informative else None
    if dp > 1:  # each pair against its DP peers', counted for both its ends
        q = _leave_one_out_quantiles(waiting["latency_s"].to_numpy(),
                                     *_place(waiting, steps, pp, dp),
                                     *_place(pairs, steps, pp, dp), (0.25, 0.5, 0.75))
        d = pairs["dp_rank"].to_numpy()
        _pool_windows(out, np.concatenate([ends[0] * dp + d, ends[1] * dp + d]),
                      np.tile(step_i, 2), np.tile(latency, 2), [np.tile(x, 2) for x in q],
                      dp, n_win, window, None if waited is None else np.tile(waited, 2))
        return out
    ref_ends = (waiting["sender_stage"].to_numpy(), receiver_stage(waiting))
    owners, at, qs = [], [], []
    for w in range(pp):  # pure PP: per worker, the pairs that touch neither of its ends
        mine = np.flatnonzero((ends[0] == w) | (ends[1] == w))
        if pp > 2:
            ref = waiting[(ref_ends[0] != w) & (ref_ends[1] != w)]
            table = ref.groupby("step")["latency_s"].quantile([0.25, 0.5, 0.75]).unstack()
            table = table.reindex(index=steps, columns=[0.25, 0.5, 0.75])
            rows = step_i[mine]
            q = [table[c].to_numpy()[rows] for c in (0.25, 0.5, 0.75)]
        else:
            q = [np.full(len(mine), v) for v in _quietest_window(waiting, steps, window)]
        owners.append(np.full(len(mine), w))
        at.append(mine)
        qs.append(q)
    mine = np.concatenate(at)
    _pool_windows(out, np.concatenate(owners), step_i[mine], latency[mine],
                  [np.concatenate([q[k] for q in qs]) for k in range(3)], dp, n_win, window,
                  None if waited is None else waited[mine])
    return out


def _start(pairs: pd.DataFrame, pp: int, dp: int, steps: np.ndarray, window: int,
           own_ok: pd.Series | None) -> tuple:
    """(signals to fill or None when there is nothing to measure, window count, reference
    pairs (receiver waiting), own pairs), all within `steps`."""
    n_win = max(len(steps) - window + 1, 0)
    in_steps = pairs["step"].isin(steps)
    waiting = pairs[in_steps & pairs["receiver_waiting"]]
    pairs = pairs[in_steps & (True if own_ok is None else own_ok)]
    if waiting.empty or pairs.empty or n_win == 0:
        return None, n_win, waiting, pairs
    return LinkSignals.empty(pp, dp, n_win), n_win, waiting, pairs


def _place(frame: pd.DataFrame, steps: np.ndarray, pp: int,
           dp: int) -> tuple[np.ndarray, np.ndarray]:
    """(reference group, member left out) of each pair: with DP peers the group is (step,
    direction, stage) and the member a DP rank, else the step and a stage."""
    step_i = np.searchsorted(steps, frame["step"].to_numpy())
    stage = frame["sender_stage"].to_numpy()
    if dp == 1:
        return step_i, stage
    forward = (frame["direction"] == "forward").to_numpy()
    return (step_i * 2 + forward) * pp + stage, frame["dp_rank"].to_numpy()


def _quietest_window(waiting: pd.DataFrame, steps: np.ndarray, window: int) -> list[float]:
    """Quartiles of the pairs in the window of `window` steps with the lowest median
    latency (from per-step medians, rolled)."""
    med = waiting.groupby("step")["latency_s"].median().reindex(steps)
    rolled = med.rolling(window).median().to_numpy()[window - 1:]
    if np.isnan(rolled).all():
        return [np.nan] * 3
    first = int(np.nanargmin(rolled))
    lat = waiting.loc[waiting["step"].isin(steps[first:first + window]), "latency_s"]
    return [float(lat.quantile(x)) for x in (0.25, 0.5, 0.75)]


def _pool_windows(out: LinkSignals, owner: np.ndarray, step_i: np.ndarray,
                  latency: np.ndarray, q: list[np.ndarray], dp: int, n_win: int,
                  window: int, waited: np.ndarray | None = None) -> None:
    """Fill `out` per owner (stage * dp + dp_rank) and window from per-pair latencies and
    their reference quartiles q = [q25, q50, q75]; pairs without a reference are left out."""
    q25, q50, q75 = q
    keep = ~np.isnan(q50)  # a pair with no reference pair left says nothing
    if waited is not None:  # a late receiver's fast pair hides what the link did
        keep &= waited | (latency > q75)
    latency, q25, q50, q75 = latency[keep], q25[keep], q50[keep], q75[keep]
    above = latency - q50
    frame = pd.DataFrame({
        "owner": owner[keep], "step_i": step_i[keep], "over": latency > q75,
        "rel": above / np.maximum(q75 - q25, 1e-6), "above": above})
    if frame.empty:
        return
    # Each pair counts in every window that holds its step: windows start at step_i - o.
    frame = pd.concat([frame.assign(w=frame["step_i"] - o) for o in range(window)])
    frame = frame[(frame["w"] >= 0) & (frame["w"] < n_win)]
    grouped = frame.groupby(["owner", "w"])
    idx = grouped.size().index
    s, w = idx.get_level_values(0).to_numpy(), idx.get_level_values(1).to_numpy()
    out.share[s // dp, s % dp, w] = grouped["over"].mean().to_numpy()
    out.excess_iqr[s // dp, s % dp, w] = grouped["rel"].median().to_numpy()
    out.excess_s[s // dp, s % dp, w] = grouped["above"].median().to_numpy()
    out.count[s // dp, s % dp, w] = grouped.size().to_numpy()


def _leave_one_out_quantiles(values: np.ndarray, group: np.ndarray, member: np.ndarray,
                             want_group: np.ndarray, want_member: np.ndarray,
                             qs: tuple[float, ...]) -> list[np.ndarray]:
    """Per wanted (group, member): quantiles (linear, as pandas) of the group's values
    without that member's; NaN where none are left. One sort, no loop over members.

    In a group sorted ascending, the member's values sit at ranks p_0 < p_1 < ...; the
    r-th smallest value left is at rank r + #{j : p_j - j <= r}.
    """
    n_groups = int(max(group.max(), want_group.max())) + 1
    n_members = int(max(member.max(), want_member.max())) + 1
    order = np.lexsort((values, group))
    v, g, m = values[order], group[order], member[order]
    size = np.bincount(g, minlength=n_groups)
    start = np.cumsum(size) - size
    rank = np.arange(len(v)) - start[g]
    # The member's ranks per (group, member) segment, ascending, as p_j - j.
    seg_key = g * n_members + m
    seg_order = np.lexsort((rank, seg_key))
    seg_key, seg_rank = seg_key[seg_order], rank[seg_order]
    keys, seg_start, seg_size = np.unique(seg_key, return_index=True, return_counts=True)
    seg = np.searchsorted(keys, seg_key)
    shifted = seg_rank - (np.arange(len(seg_rank)) - seg_start[seg])
    big = len(v) + 2
    composite = seg * big + shifted  # ascending: by segment, then p_j - j

    want_key = want_group * n_members + want_member
    at = np.minimum(np.searchsorted(keys, want_key), len(keys) - 1)
    found = keys[at] == want_key
    k = np.where(found, seg_size[at], 0)
    left = size[want_group] - k

    def nth_left(r: np.ndarray) -> np.ndarray:
        passed = np.where(found, np.searchsorted(composite, at * big + r, side="right")
                          - seg_start[at], 0)
        return start[want_group] + r + passed

    out = []
    for q in qs:
        h = q * np.maximum(left - 1, 0)
        lo = h.astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(left - 1, 0))
        a = v[np.minimum(nth_left(lo), len(v) - 1)]
        b = v[np.minimum(nth_left(hi), len(v) - 1)]
        out.append(np.where(left > 0, a + (b - a) * (h % 1), np.nan))
    return out
