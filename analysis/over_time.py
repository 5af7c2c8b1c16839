"""Evidence over time: each op kind's and each link's time against its own earlier steps.

The what-if and the detector's cross-rank rules hold an op against the same op on peer
ranks. A fault every peer shares (a throttled link a whole ring waits on, the only link
of a pipeline) leaves no faster peer, and those comparisons see nothing (design.md,
"Over time as well as across ranks"). What it does leave is a change in time: the same
ops on the same ranks take longer from one step on. This module holds that evidence,
pure numpy/pandas over a trace (no Ray, no torch, no what-if):

* `step_times`: the job's step time per step (latest end - earliest start);
* `kind_times`: per (step, rank, kind) the time that rank spent in ops of that kind;
* `link_times`: per (step, link) the time of the transfers over each link that can be
  timed on its own: a P2P send/recv pair's latency (sender stage -> receiver stage, per
  DP rank), and in a DP ring of 3 or more ranks each rank's signed ring-neighbour
  excess (`ring_order.ring_scores`: where a slow link's transfer time lands);
* `change_point`: the one window of steps whose level differs most from the steps
  outside it (least squares on log time, a window of at least MIN_SIDE steps with at
  least MIN_SIDE outside), with its first and last step (last None: to the end), kept
  only where every step inside is longer than every step outside (or shorter): a
  sustained change, not an outlier;
* `changed_kinds` / `changed_links`: what moved over that window, on which ranks;
* `transfer_times` / `transfer_change`: a communication kind's transfer once every party
  was there (a collective's least time over its ranks, a P2P pair's latency from the
  later of its two starts), per step and over a window: a slower link moves it, waiting
  on a slower compute does not (`KindChange.transfer_moved`);
* `over_own_noise`: whether a rank's comparison with its peers over a window stands
  over how far the same comparison moves on the run's other steps (its noise over time);
* `holds_sign` / `slow_regime`: whether a signed per-step comparison keeps its sign
  beyond its own step-to-step spread, over the steps a time series is at its slower
  level (the ring rule's test that a placed link is not the noise of a ring slowed alike);
* `collective_changes`: each collective kind's time on the rank that waited least in it,
  per step, against its own earlier steps: the seconds a step it adds over its own
  change-point window, on every rank (a ring's transfer slowed, however much compute
  dilutes it in the step time).

    ot = over_time(trace, dp=4, pp=1)          # OverTime
    ot.change                                  # ChangePoint | None (step time)
    ot.kinds[0].kind, ot.kinds[0].ratio        # 'grads-reduce-scatter', 8.1
    ot.note()                                  # one line: what changed, from when, where

How far clean runs move these numbers is measured on clean runs only
(`benchmarks/over_time_noise.py`, the noise floor's `job_wide_ratio`); a detector holds
a change to that floor (`whatif_rules/job_wide.py`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from stragglerlab.analysis.ring_order import MIN_RING, ring_scores
from stragglerlab.method.p2p_pairs import p2p_pair_latency, receiver_stage
from stragglerlab.trace.schema import COMMUNICATION_OPS, P2P_OPS

MIN_SIDE = 2
"""Steps inside a window, and outside it, at least: one step is an outlier, not a regime;
two are the least an online window can show a new regime with (a regime change is then
alerted on at the second step of the new regime)."""
COMM_KINDS = frozenset(o.value for o in COMMUNICATION_OPS)
"""Op kinds that are communication (a change they carry is `job-wide-comm`)."""
COLLECTIVE_KINDS = frozenset(o.value for o in COMMUNICATION_OPS - P2P_OPS)
"""Communication kinds every member of a group runs together (collectives): the member that
arrives last waits least, so the least time of the kind over its ranks in a step is the
collective's own transfer, not waiting (a P2P recv's time is mostly its sender's compute)."""
KIND_RATIO = 1.5
"""A kind moved with the step when its time per step changed by this much over the window,
the way the step did (the what-if's regime note's `analysis.regime.REGIME_RATIO`). Fixed,
not a detector threshold: what moved, and so whether a change is communication's or
compute's, does not depend on how large a change a rule asks for."""
NOISE_SDS = 4.0
"""Robust standard deviations (1.4826 x MAD) of a series' own steps outside a window that
its level inside must stand over to be beyond the run's noise over time
(`over_own_noise`). Not fitted here: the repository's bound for a step beyond the noise
(`analysis.settling.SETTLING_SDS`, `analysis.regime.LOW_STEP_SDS`)."""


@dataclass(kw_only=True)
class ChangePoint:
    """A sustained change of one series over a window of steps (module doc)."""

    first_step: int
    """First step of the window (the change's start)."""
    last_step: int | None
    """Last step of the window (inclusive); None: the change lasts to the end of the trace."""
    within: float
    """Median value inside the window."""
    outside: float
    """Median value outside it (the steps before and after, one level)."""
    start: int
    """Index of first_step in the series."""
    stop: int
    """Index one past the window's last step."""

    @property
    def ratio(self) -> float:
        """within / outside (above 1: slower inside)."""
        return self.within / self.outside if self.outside > 0 else np.inf

    def slow_part(self, steps) -> tuple[int, int] | None:
        """(first, last) step of the slower regime where it is one run of steps: the
        window when slower inside, the steps before it when it runs to the end and is
        faster (a change that ended); None for a faster window with steps on both sides."""
        steps = np.asarray(steps)
        if self.ratio >= 1:
            return self.first_step, int(steps[self.stop - 1])
        if self.stop == steps.size and self.start > 0:
            return int(steps[0]), int(steps[self.start - 1])
        return None

    @property
    def factor(self) -> float:
        """The change either way, >= 1: max(ratio, 1 / ratio)."""
        r = self.ratio
        return float(max(r, 1 / r)) if r > 0 else np.inf

    def inside(self, n: int) -> np.ndarray:
        """Boolean mask over the n steps of the series: inside the window."""
        m = np.zeros(n, dtype=bool)
        m[self.start:self.stop] = True
        return m

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"first_step": self.first_step, "last_step": self.last_step,
                "within": float(self.within), "outside": float(self.outside),
                "ratio": float(self.ratio)}


def change_point(steps, values, min_side: int = MIN_SIDE) -> ChangePoint | None:
    """The best window of a per-step series (module doc), None when no window is
    sustained (its steps do not all lie beyond every step outside) or the series is too
    short (fewer than 2 * min_side steps), non-finite or not positive."""
    steps = np.asarray(steps)
    t = np.asarray(values, dtype=float)
    n = t.size
    if n < 2 * min_side or not np.isfinite(t).all() or (t <= 0).any():
        return None
    x = np.log(t)
    c1, c2 = np.r_[0.0, np.cumsum(x)], np.r_[0.0, np.cumsum(x * x)]
    i, j = np.triu_indices(n + 1, k=min_side)          # window [i, j)
    keep = (n - (j - i)) >= min_side
    i, j = i[keep], j[keep]
    k_in, k_out = j - i, n - (j - i)
    s_in, q_in = c1[j] - c1[i], c2[j] - c2[i]
    s_out, q_out = c1[n] - s_in, c2[n] - q_in
    sse = (q_in - s_in ** 2 / k_in) + (q_out - s_out ** 2 / k_out)
    # Only sustained windows: every step inside beyond every step outside. Cheapest first:
    # order the candidates by fit and take the first that holds.
    for c in np.argsort(sse, kind="stable"):
        a, b = int(i[c]), int(j[c])
        inner, outer = t[a:b], np.r_[t[:a], t[b:]]
        if inner.min() > outer.max() or inner.max() < outer.min():
            if a == 0:  # [0, b) vs [b, n) is one fit either way: the change starts at b
                a, b = b, n
                inner, outer = outer, inner
            return ChangePoint(first_step=int(steps[a]),
                               last_step=None if b == n else int(steps[b - 1]),
                               within=float(np.median(inner)),
                               outside=float(np.median(outer)), start=a, stop=b)
    return None


def over_own_noise(series, start: int, stop: int, sds: float = NOISE_SDS) -> bool:
    """Whether a per-step series' median over the steps [start, stop) stands over its
    median outside them by `sds` robust standard deviations of the outside steps.

    The series is a rank held against its peers at the same step (its compute over
    theirs, its score over the step's best), so a host that slows every rank alike is
    already divided out; what is left moves over time by the run's own noise (on a shared
    host, two processes take turns being slow). A window that does not stand over how far
    the same comparison moves on the run's other steps is that noise, not a slow rank.
    True where fewer than MIN_SIDE finite steps lie outside (no noise to measure: the
    comparison across ranks decides alone)."""
    x = np.asarray(series, dtype=float)
    inside = np.zeros(x.size, dtype=bool)
    inside[start:stop] = True
    within, outside = x[inside & np.isfinite(x)], x[~inside & np.isfinite(x)]
    if outside.size < MIN_SIDE or not within.size:
        return True
    base = float(np.median(outside))
    sd = 1.4826 * float(np.median(np.abs(outside - base)))
    return bool(np.median(within) - base > sds * sd)


def holds_sign(series, sds: float = NOISE_SDS) -> bool:
    """Whether a per-step signed series' mean stands over zero by `sds` standard errors of
    its own steps (sample SD / sqrt(n)): a sign the steps keep, not zero-mean noise that
    a few of them share. True with fewer than MIN_SIDE finite steps (no spread to
    measure); a series with no spread holds where its mean is above zero."""
    t = sign_t(series)
    return True if t is None else bool(t > sds)


def sign_t(series) -> float | None:
    """A per-step signed series' mean over its standard error (sample SD / sqrt(n)), over
    its finite steps; +-inf where they do not spread (the sign of the mean; 0 for zero);
    None with fewer than MIN_SIDE finite steps."""
    x = np.asarray(series, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < MIN_SIDE:
        return None
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if sd > 0:
        return mean / (sd / float(np.sqrt(x.size)))
    return float(np.sign(mean)) * np.inf if mean != 0 else 0.0


def slow_regime(steps, values, ratio: float = KIND_RATIO) -> np.ndarray | None:
    """Boolean mask over the steps: the slower regime of a per-step time series (its
    change-point's `slow_part`, where it changed by `ratio` or more); None where it did not
    change so (no sustained change, or one too small to be a regime of its own)."""
    steps = np.asarray(steps)
    cp = change_point(steps, values)
    part = cp.slow_part(steps) if cp is not None and cp.factor >= ratio else None
    if part is None:
        return None
    return (steps >= part[0]) & (steps <= part[1])


def step_times(trace: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(steps ascending, the job's step time per step in s: latest end - earliest start)."""
    end = trace["start_ts"].to_numpy(float) + trace["duration"].to_numpy(float)
    steps, code = np.unique(trace["step"].to_numpy(), return_inverse=True)
    lo = np.full(steps.size, np.inf)
    hi = np.full(steps.size, -np.inf)
    np.minimum.at(lo, code, trace["start_ts"].to_numpy(float))
    np.maximum.at(hi, code, end)
    return steps, hi - lo


def kind_times(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per (step, rank, kind): `time_s`, that rank's summed op durations of that
    kind in that step."""
    kt = (trace.groupby(["step", "rank", trace["optype"].astype(str).rename("kind")],
                        observed=True)["duration"].sum().rename("time_s").reset_index())
    return kt


def link_times(trace: pd.DataFrame, dp: int, pp: int, steps: np.ndarray | None = None
               ) -> pd.DataFrame:
    """One row per (step, link): `time_s`, and the link's `ranks` (global ranks of its two
    ends, or the one rank a ring's order points at) and `what` ('p2p' or 'ring').

    P2P: the summed latency of the step's send/recv pairs from one stage to the next (per
    DP rank; both directions of a link are one link). Ring (pure DP or per stage, 3 or
    more DP ranks): the signed ring-neighbour excess that points at a rank, in s per step
    (`ring_order.ring_scores` times the mean step)."""
    steps = np.unique(trace["step"]) if steps is None else np.asarray(steps)
    rows = []
    if pp > 1:
        pairs = p2p_pair_latency(trace)
        if len(pairs):
            recv = receiver_stage(pairs)
            send = pairs["sender_stage"].to_numpy()
            lo, hi = np.minimum(send, recv), np.maximum(send, recv)
            d = pairs["dp_rank"].to_numpy()
            per = pd.DataFrame({"step": pairs["step"].to_numpy(), "lo": lo, "hi": hi, "d": d,
                                "time_s": pairs["latency_s"].to_numpy(float)})
            per = per.groupby(["step", "lo", "hi", "d"])["time_s"].sum().reset_index()
            per["link"] = [f"stage {a}-{b} link, DP rank {r}"
                           for a, b, r in zip(per["lo"], per["hi"], per["d"], strict=True)]
            per["ranks"] = [(int(a * dp + r), int(b * dp + r))
                            for a, b, r in zip(per["lo"], per["hi"], per["d"], strict=True)]
            per["what"] = "p2p"
            rows.append(per[["step", "link", "ranks", "what", "time_s"]])
    if dp >= MIN_RING:  # a ring whose order can place a link
        st, sec = step_times(trace)
        mean_s = float(sec.mean()) if sec.size else 1.0
        for stage, ops in trace.groupby("stage", sort=True):
            score = ring_scores(ops, dp, steps, mean_s)
            if score is None:
                continue
            n_s, n_r = score.shape
            rows.append(pd.DataFrame({
                "step": np.repeat(steps, n_r),
                "link": [f"ring of stage {stage}, rank {int(stage) * dp + r}'s links"
                         for r in range(n_r)] * n_s,
                "ranks": [(int(stage) * dp + r,) for r in range(n_r)] * n_s,
                "what": "ring", "time_s": (score * mean_s).reshape(-1)}))
    if not rows:
        return pd.DataFrame(columns=["step", "link", "ranks", "what", "time_s"])
    return pd.concat(rows, ignore_index=True)


@dataclass(kw_only=True)
class KindChange:
    """One op kind's change over a window."""

    kind: str
    """Op kind (optype)."""
    ratio: float
    """Its time per step (summed over ranks) inside the window over outside, medians."""
    added_s: float
    """Seconds per step it adds inside the window (summed over ranks), medians."""
    every_rank: bool
    """Every rank with such ops moved by at least the ratio threshold the caller used."""
    ranks_moved: list[int] = field(default_factory=list)
    """The ranks whose own time of the kind moved by at least that threshold."""
    transfer_ratio: float | None = None
    """A communication kind's transfer time (`transfer_times`: the time once every party
    was there) inside the window over outside, medians; None for compute kinds, or where
    no transfer could be timed (`over_time` fills it)."""
    transfer_added_s: float = 0.0
    """Seconds a step the transfer adds in the slower regime over the faster (medians)."""

    @property
    def comm(self) -> bool:
        """The kind is communication."""
        return self.kind in COMM_KINDS

    def transfer_moved(self, step_s: float, share: float) -> bool:
        """The kind's transfer itself (`transfer_times`) moved by `KIND_RATIO`, the way
        its time did, adding at least `share` of a normal step (`step_s`) a step: a slower
        link or switch, which lengthens the transfer every member spends once all are
        there. A host whose speed drifts lengthens compute, and the ranks that arrive
        early wait longer in the collective or recv; a kind whose time moved while its
        transfer did not spent the added time waiting, so the change is compute's. The
        share is the one the collective kinds' own statistic is held to
        (`job_wide_kind_share`): on a CPU host a busy scheduler lengthens even the
        transfers, by a few ms (the clean-run campaign's tuning seeds 801-803: a pure PP 4
        run's forward-send 3.6x as long, its step 1.29x, its pairs' latency 1.6x but 0.020 s,
        1.7 % of a step), while a throttle every member waits on adds a large part of the
        step (the recorded two-link DP 4 ring: its reduce-scatter's least time 0.98 s a
        step, 49 %)."""
        if self.transfer_ratio is None or step_s <= 0:
            return False
        r = self.transfer_ratio
        moved = r >= KIND_RATIO if self.ratio >= 1 else r <= 1 / KIND_RATIO
        return bool(moved and self.transfer_added_s >= share * step_s)

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"kind": self.kind, "ratio": float(self.ratio), "added_s": float(self.added_s),
                "every_rank": self.every_rank, "ranks_moved": list(self.ranks_moved),
                "transfer_ratio": (None if self.transfer_ratio is None
                                   else float(self.transfer_ratio)),
                "transfer_added_s": float(self.transfer_added_s)}


def _medians(values: pd.Series, inside: np.ndarray) -> pd.DataFrame:
    """values indexed by (group..., step) -> columns in/out: median per group inside and
    outside the window (`inside`: a boolean per row)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return values.groupby([*values.index.names[:-1], inside]).median().unstack()


def changed_kinds(kt: pd.DataFrame, cp: ChangePoint, steps: np.ndarray,
                  ratio: float) -> list[KindChange]:
    """The kinds whose time per step moved by `ratio` or more (the way the step time did)
    over the window, the kind adding the most time first. Missing steps of a kind count 0."""
    if kt.empty:
        return []
    window = set(np.asarray(steps)[cp.start:cp.stop].tolist())
    up = cp.ratio >= 1
    per_step = kt.groupby(["kind", "step"])["time_s"].sum()
    # Every (kind, step) pair, 0 where a kind was not run in a step.
    full = per_step.unstack(fill_value=0.0).reindex(columns=steps, fill_value=0.0).stack()
    inside = np.isin(full.index.get_level_values("step"), list(window))
    med = _medians(full, inside)
    if med.shape[1] < 2:
        return []
    by_rank = kt.set_index(["kind", "rank", "step"])["time_s"]
    rmed = _medians(by_rank, np.isin(by_rank.index.get_level_values("step"), list(window)))
    out = []
    for kind, row in med.iterrows():
        within, outside = float(row.get(True, np.nan)), float(row.get(False, np.nan))
        if not (np.isfinite(within) and np.isfinite(outside)):
            continue
        r = within / outside if outside > 0 else (np.inf if within > 0 else 1.0)
        if not ((r >= ratio) if up else (r <= 1 / ratio)):
            continue
        ranks_moved, every = [], False
        if kind in rmed.index.get_level_values(0) and rmed.shape[1] == 2:
            rr = rmed.loc[kind]
            rr = rr[True] / rr[False].where(rr[False] > 0)
            ok = (rr >= ratio) if up else (rr <= 1 / ratio)
            ranks_moved = sorted(int(k) for k in rr.index[ok.fillna(False).to_numpy()])
            every = bool(ok.fillna(False).all())
        out.append(KindChange(kind=str(kind), ratio=float(r), added_s=within - outside,
                              every_rank=every, ranks_moved=ranks_moved))
    out.sort(key=lambda k: -abs(k.added_s))
    return out


def transfer_times(trace: pd.DataFrame, kind: str, steps: np.ndarray) -> np.ndarray | None:
    """Per step, the time a communication kind's transfers took once every party was there,
    s (NaN where a step has none); None for a compute kind or where none can be timed.

    A collective: the least time of the kind over the ranks that run it (the rank that
    arrived last waited least; `collective_changes`). A P2P kind: the summed latency of
    its direction's send/recv pairs, from the later of the two starts to the recv's end
    (`p2p_pair_latency`: a recv posted early waits for its sender, that wait left out),
    each link's pairs counted at their median (a pair the scheduler delayed is one pair; a
    slower link delays them all)."""
    steps = np.asarray(steps)
    if kind in COLLECTIVE_KINDS:
        ops = trace[trace["optype"].astype(str) == kind]
        if ops.empty:
            return None
        least = kind_times(ops).groupby("step")["time_s"].min()
        return least.reindex(steps).to_numpy(float)
    if kind in {o.value for o in P2P_OPS}:
        pairs = p2p_pair_latency(trace)
        pairs = pairs[pairs["direction"].astype(str) == kind.split("-")[0]]
        if pairs.empty:
            return None
        per_link = pairs.groupby(["step", "sender_stage", "dp_rank"])["latency_s"]
        per_link = per_link.median() * per_link.size()
        return per_link.groupby("step").sum().reindex(steps).to_numpy(float)
    return None


def transfer_change(trace: pd.DataFrame, kind: str, cp: ChangePoint,
                    steps: np.ndarray) -> tuple[float, float] | None:
    """A communication kind's transfer time (`transfer_times`) inside the change-point's
    window over outside it (medians), and the seconds a step it adds in the slower of the
    two; None where it cannot be timed on both sides."""
    t = transfer_times(trace, kind, steps)
    if t is None:
        return None
    inside = cp.inside(len(steps))
    within, outside = t[inside & np.isfinite(t)], t[~inside & np.isfinite(t)]
    if not within.size or not outside.size:
        return None
    hi, lo = float(np.median(within)), float(np.median(outside))
    if lo <= 0:
        return None
    return hi / lo, abs(hi - lo)


@dataclass(kw_only=True)
class LinkChange:
    """One link's change over a window."""

    link: str
    """Which link: `stage 0-1 link, DP rank 0`, or a ring rank's links."""
    ranks: tuple[int, ...]
    """Global ranks that place it (a P2P link's two ends; the rank a ring points at)."""
    what: str
    """'p2p' or 'ring'."""
    within_s: float
    """Its time per step inside the window (median), s."""
    outside_s: float
    """Outside it, s."""

    @property
    def added_s(self) -> float:
        """Seconds per step it adds inside the window."""
        return self.within_s - self.outside_s

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"link": self.link, "ranks": list(self.ranks), "what": self.what,
                "within_s": float(self.within_s), "outside_s": float(self.outside_s)}


def changed_links(lt: pd.DataFrame, cp: ChangePoint, steps: np.ndarray,
                  ratio: float, step_share: float, step_s: float) -> list[LinkChange]:
    """The links that place the change, the one adding the most first.

    A P2P link places it when its time moved by `ratio` or more over the window and
    adds the most of any link, by more than half again the next link's addition (else
    every link moved alike and none is placed). A ring rank places it when its signed
    neighbour excess rises by `step_share` of a step (`step_s`) inside the window over
    outside, clearly the most of its ring's ranks (twice the next): the order of the
    ring points at its links."""
    if lt.empty:
        return []
    window = np.asarray(steps)[cp.start:cp.stop]
    inside = lt["step"].isin(window).to_numpy()
    g = lt.assign(inside=inside).groupby(["link", "inside"])["time_s"].median().unstack()
    if g.shape[1] < 2:
        return []
    meta = lt.drop_duplicates("link").set_index("link")
    found = []
    for what in ("p2p", "ring"):
        sub = g[meta.loc[g.index, "what"].to_numpy() == what]
        if sub.empty:
            continue
        added = (sub[True] - sub[False]).sort_values(ascending=False)
        top = added.index[0]
        nxt = float(added.iloc[1]) if len(added) > 1 else 0.0
        within, outside = float(sub.loc[top, True]), float(sub.loc[top, False])
        if what == "p2p":
            moved = outside > 0 and within / outside >= ratio
            placed = moved and added.iloc[0] > 1.5 * max(nxt, 0.0)
        else:
            placed = (added.iloc[0] >= step_share * step_s
                      and added.iloc[0] > 2 * max(nxt, 0.0))
        if placed:
            found.append(LinkChange(link=str(top), ranks=tuple(meta.loc[top, "ranks"]),
                                    what=what, within_s=within, outside_s=outside))
    found.sort(key=lambda c: -c.added_s)
    return found


@dataclass(kw_only=True)
class CollectiveChange:
    """One collective kind's change over time on every rank (`collective_changes`)."""

    kind: str
    """Op kind (a collective)."""
    change: ChangePoint
    """The change-point of its least time over ranks per step."""
    first_step: int
    """First step of the slower regime."""
    last_step: int
    """Last step of the slower regime (inclusive)."""
    n_steps: int
    """Steps in the slower regime."""
    added_s: float
    """Seconds a step it adds on every rank in the slower regime (medians of its least time
    over ranks, inside over outside)."""
    step_s: float
    """The job's median step time outside the slower regime, s."""

    @property
    def share(self) -> float:
        """added_s over step_s: the share of a normal step the kind adds on every rank (the
        rule's statistic, `job_wide_kind_share`)."""
        return self.added_s / self.step_s if self.step_s > 0 else 0.0

    def note(self) -> str:
        """One line: from when, what, how much (the ranks where a link is placed: caller)."""
        return (f"from step {self.first_step} to step {self.last_step}, {self.kind} takes "
                f"{self.change.factor:.1f}x longer on every rank, {self.added_s:.3f} s a "
                f"step ({self.share:.0%} of a step)")

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"kind": self.kind, "change": self.change.to_dict(),
                "first_step": self.first_step, "last_step": self.last_step,
                "added_s": float(self.added_s), "step_s": float(self.step_s),
                "share": float(self.share)}


def collective_changes(trace: pd.DataFrame, ratio: float = KIND_RATIO
                       ) -> list[CollectiveChange]:
    """Each collective kind whose least time over its ranks per step changed by `ratio` or
    more over a sustained window (`change_point`), the largest share of a step first.

    The least time over the ranks that run the kind is what every one of them spent in it:
    the rank that arrived last waited least, so a clean job's jitter (peers waiting for a
    slow compute) does not move it, while a slower transfer, which every member waits on,
    does. Its added seconds a step are held against the job's normal step, so the
    statistic is a share of a step like the link rules' and does not shrink with the
    step ratio when compute dominates the step."""
    steps, sec = step_times(trace)
    ops = trace[trace["optype"].astype(str).isin(COLLECTIVE_KINDS)]
    if ops.empty:
        return []
    kt = kind_times(ops)
    out = []
    for kind, g in kt.groupby("kind", sort=True):
        least = g.groupby("step")["time_s"].min().reindex(steps).to_numpy(float)
        cp = change_point(steps, least) if np.isfinite(least).all() else None
        if cp is None or cp.factor < ratio:
            continue
        part = cp.slow_part(steps)
        if part is None:
            continue
        slow = (steps >= part[0]) & (steps <= part[1])
        added = float(np.median(least[slow]) - np.median(least[~slow]))
        out.append(CollectiveChange(kind=str(kind), change=cp, first_step=int(part[0]),
                                    last_step=int(part[1]), n_steps=int(slow.sum()),
                                    added_s=added, step_s=float(np.median(sec[~slow]))))
    out.sort(key=lambda c: -c.share)
    return out


@dataclass(kw_only=True)
class OverTime:
    """A trace's evidence over time: the step-time change and what moved with it."""

    steps: np.ndarray
    """Steps, ascending."""
    step_s: np.ndarray
    """The job's step time per step, s."""
    change: ChangePoint | None
    """The step time's change-point (None: no sustained window)."""
    kinds: list[KindChange] = field(default_factory=list)
    """Kinds that moved over it (empty without a change)."""
    kind_changes: dict[str, ChangePoint] = field(default_factory=dict)
    """Each moved kind's own change-point in its time per step (summed over ranks)."""
    links: list[LinkChange] = field(default_factory=list)
    """Links that place it."""
    transfer_share: float = 0.05
    """The share of a normal step a communication kind's transfer must add for the change
    to be communication's (`comm`; the caller's `job_wide_kind_share`)."""

    @property
    def comm(self) -> bool:
        """The kind adding the most time over the window is communication and its transfer
        moved with it by `transfer_share` of a normal step (`KindChange.transfer_moved`);
        else the change is compute's, however much of it was spent waiting in
        communication ops."""
        if not self.kinds or not self.kinds[0].comm or self.change is None:
            return False
        normal = min(self.change.within, self.change.outside)
        return self.kinds[0].transfer_moved(normal, self.transfer_share)

    def note(self) -> str:
        """One line: from which step, what, where (empty without a change)."""
        cp = self.change
        if cp is None:
            return ""
        way = "longer" if cp.ratio >= 1 else "shorter"
        until = "" if cp.last_step is None else f" to step {cp.last_step}"
        if self.kinds:
            k = self.kinds[0]
            f = k.ratio if cp.ratio >= 1 else 1 / k.ratio
            what = (f"{k.kind} takes {f:.1f}x {way}"
                    + (" on every rank" if k.every_rank else
                       f" on rank(s) {', '.join(map(str, k.ranks_moved))}")
                    + (", its transfer not (waiting on compute)"
                       if k.comm and not self.comm else ""))
        else:
            what = f"the step takes {cp.factor:.1f}x {way}, no one kind carrying it"
        where = (f" ({'; '.join(c.link for c in self.links)})" if self.links else "")
        kind = "a shared link or switch" if self.comm else "a change every rank shares"
        return f"from step {cp.first_step}{until}, {what}{where}: {kind}, not a straggler"

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"change": None if self.change is None else self.change.to_dict(),
                "kinds": [k.to_dict() for k in self.kinds],
                "kind_changes": {k: c.to_dict() for k, c in self.kind_changes.items()},
                "links": [c.to_dict() for c in self.links]}


def over_time(trace: pd.DataFrame, dp: int, pp: int, ratio: float = KIND_RATIO,
              ring_step_share: float = 0.05, transfer_share: float = 0.05) -> OverTime:
    """The trace's evidence over time: its step-time change-point and, where there is one,
    the kinds that moved by `ratio` (the way the step did), their transfers
    (`transfer_change`; `transfer_share` for `OverTime.comm`) and the links that place it
    (`changed_links`; `ring_step_share` for a ring's order)."""
    steps, sec = step_times(trace)
    cp = change_point(steps, sec)
    out = OverTime(steps=steps, step_s=sec, change=cp, transfer_share=transfer_share)
    if cp is None:
        return out
    kt = kind_times(trace)
    out.kinds = changed_kinds(kt, cp, steps, ratio)
    for k in out.kinds:
        got = transfer_change(trace, k.kind, cp, steps) if k.comm else None
        if got is not None:
            k.transfer_ratio, k.transfer_added_s = got
    per_step = kt.groupby(["kind", "step"])["time_s"].sum()
    for k in out.kinds:
        series = per_step.loc[k.kind].reindex(steps)
        if series.notna().all():
            got = change_point(steps, series.to_numpy())
            if got is not None:
                out.kind_changes[k.kind] = got
    out.links = changed_links(link_times(trace, dp, pp, steps), cp, steps, ratio,
                              ring_step_share, float(np.median(sec)))
    return out
