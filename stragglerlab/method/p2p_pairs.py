"""P2P pairs of a trace and their latency: the one home of pairing a send with its recv.

Injectors measure a slowed link with it (net-delay, net-throttle) and the `whatif`
detector localizes one with it, so both read the same pairs the same way.
Pure pandas/numpy over a trace, no I/O. The live monitor runs it on every window, so
the pairing and the per-window pooling work on arrays (`stragglerlab.method.grouped`), with
the same numbers a pandas merge and groupby gave:

    pairs = p2p_pair_latency(trace)          # one row per send/recv pair
    rows = p2p_pair_rows(trace)              # their send and recv row positions
    signals = sender_window_signals(pairs, pp, dp, steps, window=3)  # LinkSignals
    signals = worker_window_signals(pairs, pp, dp, steps, window=3)  # sent or received
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.method.grouped import (
    group_quantiles,
    group_value_order,
    inner_join,
    optype_masks,
    sorted_group_median,
)

_KEYS = ["step", "dp_rank", "stage", "seq_id"]
_DIRECTIONS = (("forward", 1), ("backward", -1))


def p2p_pair_rows(trace: pd.DataFrame) -> pd.DataFrame:
    """Every P2P pair of the trace as the row positions (`iloc`) of its send and its recv.

    Columns: direction ('forward' or 'backward'), send_row, recv_row, step, dp_rank,
    sender_stage, seq_id. The k-th send of a stage pairs with the k-th recv of the peer
    stage (same DP rank and step): a forward send of stage p with the forward recv of
    stage p + 1, a backward send with the backward recv of stage p - 1 (same seq_id).
    Forward pairs first, each direction in the order of its sends.
    """
    direction, send, recv = _pair_positions(trace)
    out = {"direction": direction, "send_row": send, "recv_row": recv}
    out.update({("sender_stage" if k == "stage" else k): _take(trace[k], send) for k in _KEYS})
    return pd.DataFrame(out)


def p2p_pair_latency(trace: pd.DataFrame) -> pd.DataFrame:
    """Every P2P pair of the trace with its latency: recv end minus the later of both starts.

    Columns: step, dp_rank, sender_stage, direction, seq_id, latency_s, receiver_waiting
    (the recv was posted before the send: latency is then the whole transfer). Pairs as
    `p2p_pair_rows`.
    """
    direction, send, recv = _pair_positions(trace)
    start = trace["start_ts"].to_numpy()
    end = start + trace["duration"].to_numpy()
    return pd.DataFrame({
        "step": _take(trace["step"], send), "dp_rank": _take(trace["dp_rank"], send),
        "sender_stage": _take(trace["stage"], send), "direction": direction,
        "seq_id": _take(trace["seq_id"], send),
        "latency_s": end[recv] - np.maximum(start[send], start[recv]),
        "receiver_waiting": start[recv] <= start[send]})


def _pair_positions(trace: pd.DataFrame) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """(direction per pair, send row, recv row) of every pair, as `p2p_pair_rows` orders
    them; the join on (step, dp_rank, sender's stage, seq_id) is a merge's, on arrays."""
    optype = trace["optype"]  # read first: a trace without it fails as it always did
    keys = [trace[k].to_numpy() for k in _KEYS]
    if not all(k.dtype.kind in "iu" for k in keys):  # NaN-able keys: pandas' own merge
        return _merged_positions(trace)
    masks = optype_masks(optype, [[f"{d}-{end}"] for d, _ in _DIRECTIONS
                                  for end in ("send", "recv")])
    sends, recvs, kind = [], [], []
    for k, (_, peer_offset) in enumerate(_DIRECTIONS):
        send_pos, recv_pos = np.flatnonzero(masks[2 * k]), np.flatnonzero(masks[2 * k + 1])
        right = [key[recv_pos] for key in keys]
        right[2] = right[2] - peer_offset  # keyed by the sender's stage
        li, ri = inner_join([key[send_pos] for key in keys], right)
        sends.append(send_pos[li])
        recvs.append(recv_pos[ri])
        kind.append(np.full(len(li), k))
    # The names as one string column (the dtype pandas gives text), taken from two.
    names = pd.Series(pd.array([d for d, _ in _DIRECTIONS], dtype="str").take(
        np.concatenate(kind)))
    return names, np.concatenate(sends), np.concatenate(recvs)


def _merged_positions(trace: pd.DataFrame) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """`_pair_positions` by pandas' merge: for key columns that are not plain integers."""
    opt = trace["optype"].astype(str).to_numpy()
    keys = trace[_KEYS].reset_index(drop=True)
    out = []
    for direction, peer_offset in _DIRECTIONS:
        send_pos = np.flatnonzero(opt == f"{direction}-send")
        recv_pos = np.flatnonzero(opt == f"{direction}-recv")
        sends = keys.iloc[send_pos].assign(send_row=send_pos)
        recvs = keys.iloc[recv_pos].assign(recv_row=recv_pos)
        recvs = recvs.assign(stage=recvs["stage"] - peer_offset)
        out.append(sends.merge(recvs, on=_KEYS).assign(direction=direction))
    pairs = pd.concat(out, ignore_index=True)
    return (pairs["direction"].astype("str"), pairs["send_row"].to_numpy(np.int64),
            pairs["recv_row"].to_numpy(np.int64))


def _take(column: pd.Series, rows: np.ndarray) -> pd.Series:
    """The column's values at row positions `rows`, its dtype kept, on a fresh RangeIndex."""
    values = column.to_numpy()
    if values.dtype == column.dtype:  # a plain numpy column: no pandas take needed
        return pd.Series(values[rows])
    return column.iloc[rows].reset_index(drop=True)


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


@dataclass(frozen=True)
class PairArrays:
    """The columns of `p2p_pair_latency`'s pairs the signals read, as arrays: taken once
    per window and handed to both signal functions (the monitor runs them on every
    window, where DataFrame filtering and string compares cost more than the arithmetic).

        arrays = PairArrays.of(p2p_pair_latency(trace))
    """

    step: np.ndarray
    dp_rank: np.ndarray
    sender: np.ndarray
    """The sender's stage."""
    forward: np.ndarray
    """True for a forward pair."""
    latency: np.ndarray
    waiting: np.ndarray
    """The receiver was already waiting (`p2p_pair_latency`'s receiver_waiting)."""

    @classmethod
    def of(cls, pairs: pd.DataFrame) -> PairArrays:
        """The arrays of a pairs frame (`p2p_pair_latency`)."""
        return cls(pairs["step"].to_numpy(), pairs["dp_rank"].to_numpy(),
                   pairs["sender_stage"].to_numpy(), (pairs["direction"] == "forward").to_numpy(),
                   pairs["latency_s"].to_numpy(), pairs["receiver_waiting"].to_numpy())

    @property
    def receiver(self) -> np.ndarray:
        """The recv's stage, as `receiver_stage`."""
        return self.sender + np.where(self.forward, 1, -1)

    def rows(self, mask: np.ndarray) -> PairArrays:
        """The pairs where `mask` holds."""
        return PairArrays(*(getattr(self, k)[mask] for k in self.__dataclass_fields__))


def sender_window_signals(pairs: pd.DataFrame | PairArrays, pp: int, dp: int,
                          steps: np.ndarray, window: int,
                          own_ok: pd.Series | np.ndarray | None = None,
                          informative: bool = False,
                          reference: list[np.ndarray] | None = None) -> LinkSignals:
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
    completes its recvs late by itself); a Series is aligned with a frame's index, an
    array is by position. pairs: `p2p_pair_latency`'s frame, or its `PairArrays` when
    the caller runs both signal functions on it; reference: `reference_quartiles` of
    those arrays when the caller runs both (they share it, whatever their own_ok).

    The reference of a pair is the same step's pairs of the other senders, and with DP
    peers only those of the same stage and direction: pairs differ by where they sit in
    the pipeline (a stage's forward sends are not its backward sends), so a sender is
    compared with the senders in its place. NaN where a sender has no pair in a window,
    or the run is shorter than `window`.
    """
    out, n_win, waiting, own, own_mask = _start(pairs, pp, dp, steps, window, own_ok)
    if out is None:
        return LinkSignals.empty(pp, dp, n_win)
    q = _own_quartiles(waiting, own, own_mask, steps, pp, dp, reference)
    _pool_windows(out, own.sender * dp + own.dp_rank, np.searchsorted(steps, own.step),
                  own.latency, q, dp, n_win, window, own.waiting if informative else None)
    return out


def worker_window_signals(pairs: pd.DataFrame | PairArrays, pp: int, dp: int,
                          steps: np.ndarray, window: int,
                          own_ok: pd.Series | np.ndarray | None = None,
                          informative: bool = False,
                          reference: list[np.ndarray] | None = None) -> LinkSignals:
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

    own_ok, informative and reference: as for `sender_window_signals`.
    """
    out, n_win, waiting, own, own_mask = _start(pairs, pp, dp, steps, window, own_ok)
    if out is None:
        return LinkSignals.empty(pp, dp, n_win)
    ends = (own.sender, own.receiver)
    step_i, latency = np.searchsorted(steps, own.step), own.latency
    waited = own.waiting if informative else None
    if dp > 1:  # each pair against its DP peers', counted for both its ends
        q = _own_quartiles(waiting, own, own_mask, steps, pp, dp, reference)
        d = own.dp_rank
        _pool_windows(out, np.concatenate([ends[0] * dp + d, ends[1] * dp + d]),
                      np.tile(step_i, 2), np.tile(latency, 2), [np.tile(x, 2) for x in q],
                      dp, n_win, window, None if waited is None else np.tile(waited, 2))
        return out
    ref_ends = (waiting.sender, waiting.receiver)
    # Two stages: every worker's reference is the same quietest window; found once.
    quiet = _quietest_window(waiting, steps, window) if pp <= 2 else None
    owners, at, qs = [], [], []
    for w in range(pp):  # pure PP: per worker, the pairs that touch neither of its ends
        mine = np.flatnonzero((ends[0] == w) | (ends[1] == w))
        if pp > 2:
            ref = (ref_ends[0] != w) & (ref_ends[1] != w)
            table = group_quantiles(np.searchsorted(steps, waiting.step[ref]),
                                    waiting.latency[ref], len(steps),
                                    (0.25, 0.5, 0.75))  # per step, as groupby().quantile
            q = [column[step_i[mine]] for column in table]
        else:
            q = [np.full(len(mine), v) for v in quiet]
        owners.append(np.full(len(mine), w))
        at.append(mine)
        qs.append(q)
    mine = np.concatenate(at)
    _pool_windows(out, np.concatenate(owners), step_i[mine], latency[mine],
                  [np.concatenate([q[k] for q in qs]) for k in range(3)], dp, n_win, window,
                  None if waited is None else waited[mine])
    return out


def _start(pairs: pd.DataFrame | PairArrays, pp: int, dp: int, steps: np.ndarray,
           window: int, own_ok: pd.Series | np.ndarray | None) -> tuple:
    """(signals to fill or None when there is nothing to measure, window count, reference
    pairs (receiver waiting), own pairs, the own pairs' mask over all pairs), all within
    `steps`."""
    n_win = max(len(steps) - window + 1, 0)
    if isinstance(own_ok, pd.Series) and isinstance(pairs, pd.DataFrame) \
            and not own_ok.index.equals(pairs.index):
        own_ok = own_ok.reindex(pairs.index, fill_value=False)  # aligned on labels
    arrays = pairs if isinstance(pairs, PairArrays) else PairArrays.of(pairs)
    in_steps = np.isin(arrays.step, steps)
    waiting_mask = in_steps & arrays.waiting.astype(bool)
    own_mask = in_steps if own_ok is None else in_steps & np.asarray(own_ok, dtype=bool)
    waiting, own = arrays.rows(waiting_mask), arrays.rows(own_mask)
    out = None if (not waiting_mask.any() or not own_mask.any() or n_win == 0) \
        else LinkSignals.empty(pp, dp, n_win)
    return out, n_win, waiting, own, own_mask


def reference_quartiles(pairs: PairArrays, steps: np.ndarray, pp: int,
                        dp: int) -> list[np.ndarray]:
    """Per pair of `pairs` within `steps` (NaN for the others): the quartiles [q25, q50,
    q75] of its reference pairs (receiver waiting) in its place, itself and its member's
    left out (see `_place`); both signal functions take them as `reference`, so a caller
    that runs both computes them once."""
    in_steps = np.isin(pairs.step, steps)
    waiting = pairs.rows(in_steps & pairs.waiting.astype(bool))
    out = [np.full(len(pairs.step), np.nan) for _ in range(3)]
    if len(waiting.step) and in_steps.any():
        q = _leave_one_out_quantiles(waiting.latency, *_place(waiting, steps, pp, dp),
                                     *_place(pairs.rows(in_steps), steps, pp, dp),
                                     (0.25, 0.5, 0.75))
        for column, values in zip(out, q):
            column[in_steps] = values
    return out


def _own_quartiles(waiting: PairArrays, own: PairArrays, own_mask: np.ndarray,
                   steps: np.ndarray, pp: int, dp: int,
                   reference: list[np.ndarray] | None) -> list[np.ndarray]:
    """The own pairs' reference quartiles: taken from `reference` when given (a pair's
    quartiles do not depend on which other pairs are wanted), else computed."""
    if reference is not None:
        return [column[own_mask] for column in reference]
    return _leave_one_out_quantiles(waiting.latency, *_place(waiting, steps, pp, dp),
                                    *_place(own, steps, pp, dp), (0.25, 0.5, 0.75))


def _place(pairs: PairArrays, steps: np.ndarray, pp: int,
           dp: int) -> tuple[np.ndarray, np.ndarray]:
    """(reference group, member left out) of each pair: with DP peers the group is (step,
    direction, stage) and the member a DP rank, else the step and a stage."""
    step_i = np.searchsorted(steps, pairs.step)
    if dp == 1:
        return step_i, pairs.sender
    return (step_i * 2 + pairs.forward) * pp + pairs.sender, pairs.dp_rank


def _quietest_window(pairs: PairArrays, steps: np.ndarray, window: int) -> list[float]:
    """Quartiles of the (reference) pairs in the window of `window` steps with the lowest
    median latency (from per-step medians, rolled)."""
    waiting = pd.DataFrame({"step": pairs.step, "latency_s": pairs.latency})
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
    their reference quartiles q = [q25, q50, q75]; pairs without a reference are left out.

    The pairs are sorted once per median (by owner, then value); a window's pairs keep that
    order, so each window's per-owner medians are read at positions, with no sort of the
    pairs copied into every window that holds their step (`window` times as many rows)."""
    q25, q50, q75 = q
    keep = ~np.isnan(q50)  # a pair with no reference pair left says nothing
    if waited is not None:  # a late receiver's fast pair hides what the link did
        keep &= waited | (latency > q75)
    latency, q25, q50, q75 = latency[keep], q25[keep], q50[keep], q75[keep]
    if not len(latency):
        return
    owner, step_i = owner[keep], step_i[keep]
    above = latency - q50
    over, rel = latency > q75, above / np.maximum(q75 - q25, 1e-6)
    n_owner = out.share.shape[0] * out.share.shape[1]
    medians = []  # per median: (pairs by owner then value, their steps' order)
    for values in (rel, above):
        order = group_value_order(owner, values)
        by_step = np.argsort(step_i[order], kind="stable")  # positions in `order`, by step
        medians.append((values, order, by_step))
    # Pairs of steps before t: bounds[t] (step_i < n_win + window - 1, the run's steps).
    bounds = np.r_[0, np.cumsum(np.bincount(step_i, minlength=n_win + window - 1))]
    for w in range(n_win):  # the window of steps w .. w + window - 1
        lo, hi = bounds[w], bounds[w + window]
        if lo == hi:
            continue
        for k, (values, order, by_step) in enumerate(medians):
            rows = order[np.sort(by_step[lo:hi])]  # the window's pairs, by owner then value
            key = owner[rows]
            med = sorted_group_median(key, values[rows], n_owner)
            if k == 0:
                size = np.bincount(key, minlength=n_owner)
                s = np.flatnonzero(size)
                # The share is the mean of a bool (an exact count over the size, as pandas'
                # mean).
                share = np.bincount(key, weights=over[rows], minlength=n_owner)
                out.share[s // dp, s % dp, w] = share[s] / size[s]
                out.count[s // dp, s % dp, w] = size[s]
                out.excess_iqr[s // dp, s % dp, w] = med[s]
            else:
                out.excess_s[s // dp, s % dp, w] = med[s]


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
    order = group_value_order(group, values)  # np.lexsort((values, group))
    v, g, m = values[order], group[order], member[order]
    size = np.bincount(g, minlength=n_groups)
    start = np.cumsum(size) - size
    rank = np.arange(len(v)) - start[g]
    # The member's ranks per (group, member) segment, ascending, as p_j - j.
    seg_key = g * n_members + m
    # np.lexsort((rank, seg_key)): the pairs (seg_key, rank) are distinct, one integer each
    seg_order = np.argsort(seg_key * len(v) + rank) \
        if (int(seg_key.max()) + 1) * len(v) < 2**62 else np.lexsort((rank, seg_key))
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
