"""The what-if method (design.md section 4) on the general op model (stragglerlab.trace.op_model).

    res = whatif_general(ops)          # GeneralWhatIf; res.to_dict() for whatif.json

* T: the simulation of the traced gaps and transfer durations
  (stragglerlab.analysis.general_sim), mean over steps.
* Ideal: each compute segment (gap) replaced by the mean (`compute_ideal`
  "median": the median) over the ranks that do the same work in the same step
  (same role, same position k in a chain of the same length); each
  communication op's transfer duration by the median over the ops doing the
  same work (same kind and message size, or, unsized, the same role and
  position), over every step. T_ideal: that
  simulated; S = T / T_ideal; waste = 1 - 1/S; per-step S_s = T_s / T_ideal_s.
* Pipelines (stages joined by P2P): the paper pools each compute optype over
  every stage, so its ideal pipeline is evenly partitioned. Stages run
  different code, so the general model has no optype across them: it keeps
  each stage's ideal segments in their pattern and scales them so that every
  stage computes the mean stage's time in the step (`stage_balance`). A
  heavy stage then shows in S_stage and M_S, as a partitioning imbalance does
  in the paper (design.md section 5). Not with the host model (its host parts
  are waits as well as work).
* Attribution: S_t = T_ideal(kind t original) / T_ideal for `compute` (the
  gaps) and each communication kind; S_rank, and S_dp / S_stage where the
  layout is known, leaving that rank / DP rank / stage original. `share` =
  (S_x - 1) / sum over x of (S_x - 1): how the attributable slowdown splits.
* Where the job is made of replicas (a DP rank's ranks) of a few classes, the rank
  and DP-rank scenarios replay on one replica per class and the scenario's, bit for
  bit the whole table's replays (stragglerlab.analysis.general_replicas): linear in
  the ranks, not quadratic.
* Workers: S_w = min(S_dp, S_stage) with a layout, else S_rank. M_W = (T -
  T_fixW) / (T - T_ideal) with W the top ceil(3%) workers by S_w; M_S the
  same fixing the last stage (0 without PP, None without a layout).
* GPU traces with their launches and waits traced: the host model
  (stragglerlab.importers.general_host) runs beside each chain, its host
  segments and device parts idealized apart; `by_segment_part` splits the
  compute attribution into host and device time.
* The traced step is measured as the simulation measures T (last rank's step
  start to last rank's step end); `validity` (stragglerlab.run.validity) withholds
  the straggling verdict where the simulation misses it by more than 5 % or a
  launch-bound trace could not get the host model; `regime_change`
  (analysis.regime) names a change every rank shares over time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from stragglerlab.analysis.general_replicas import Replicas, replicas
from stragglerlab.analysis.general_sim import HOST_PARTS, schedule, simulate, simulate_masks
from stragglerlab.analysis.regime import low_step_note, regime_change
from stragglerlab.analysis.settling import settling_note
from stragglerlab.run.validity import Finding, Reason, Validity, judge
from stragglerlab.run.whatif_summary import SUMMARY_KEY, WhatIfSummary, summary_of_general
from stragglerlab.trace.op_model import COMPUTE, P2P_KINDS, STEP_END, gap_ends

TOP_WORKERS = 0.03
"""Share of workers W that M_W fixes (rounded up)."""
LAUNCH_BOUND_BUSY = 0.5
"""GPU busy share of the compute segments under which a GPU trace is launch-bound: the
segments between collectives are then mostly GPU idle time that the host sets (it was
still launching), so idealizing them idealizes host time the chain model does not
represent (design.md, "Host and device"). A device-bound job's segments are mostly busy."""
AT_LAUNCH_SHARE = 0.5
"""Share of GPU ops that started as their launch returned (the import's
`kernels_at_launch_share`) at or above which the GPU mostly waited for the host."""
ENTRY_SKEW_SHARE = 0.10
"""Step-entry skew (last rank's step start minus a rank's) over this share of the step is
reported: its cause lies in an untraced step before, which the what-if cannot see."""
LOCAL_OPS_SHARE = 0.25
"""Share of communication ops with no traced peer over which a reader is told: their waits
for the untraced peers are taken as work."""
HOST_SIDE = frozenset({"host_s", "host_after_s", "gate_back_s", "sync_gate_s"})
"""The host model's parts that are host time (the rest, sync_s, sync_tail_s and
gate_tail_s, and the device work, are device time)."""
HOST, DEVICE = "host", "device"
"""The parts of a GPU trace's compute segment: GPU-busy time (device) and the rest (host:
launches, CPU ops, the Python around them, or a dataloader stall)."""
COMPUTE_IDEALS = ("mean", "median")
"""Statistics that idealize a compute segment: mean (the paper's, design.md) or median
(design.md Appendix A's option for jobs of few workers: one slow rank of three or more moves
the mean, not the median)."""


@dataclass(kw_only=True)
class GeneralWhatIf:
    """What-if results on the general op model (seconds; slowdowns are ratios)."""

    T: float
    """Simulated mean step time with the traced durations."""
    T_ideal: float
    """Simulated mean step time with idealized durations."""
    S: float
    """Job slowdown T / T_ideal."""
    waste: float
    """1 - 1/S."""
    straggling: bool | None
    """S >= 1.1 where `validity` holds (or was forced); None: no verdict (gated)."""
    actual_step_s: float
    """Mean over steps of the traced step time, measured as the simulation measures T: from
    the last rank's step start to the last rank's step end (the simulation starts every
    rank's chain together)."""
    discrepancy: float
    """actual_step_s / T - 1 (how far the simulation is from the trace)."""
    validity: Validity
    """The reproduction gate (stragglerlab.run.validity): whether S may be read as the job's."""
    per_step: dict[int, float]
    """Step -> S_s."""
    by_kind: dict[str, float]
    """'compute' and each communication kind -> S_t."""
    by_rank: dict[int, float]
    """Rank -> S leaving only that rank original."""
    by_dp: dict[int, float] | None
    """DP rank -> S_dp (None without a layout)."""
    by_stage: dict[int, float] | None
    """Stage -> S_stage (None without a layout)."""
    kind_share: dict[str, float]
    """(S_t - 1) / sum (S_t - 1) per kind (0 when nothing is attributable)."""
    rank_share: dict[int, float]
    """(S_rank - 1) / sum (S_rank - 1) per rank."""
    worker_score: dict[int, float]
    """Rank -> S_w."""
    top_workers: list[int]
    """W: the ranks M_W fixes."""
    M_W: float
    """(T - T_fixW) / (T - T_ideal); 0 when T <= T_ideal."""
    M_S: float | None
    """Same for the last stage; 0 without PP; None when the stage is unknown."""
    released_groups: int
    """Groups released early in the simulation (ranks' orders contradicted)."""
    compute_ideal: str = "mean"
    """Statistic of the compute segments' ideal (COMPUTE_IDEALS)."""
    notes: list[str] = field(default_factory=list)
    """What a reader should know."""
    step_time_actual_s: dict[int, float] = field(default_factory=dict)
    """Step -> traced step time (latest rank), s."""
    step_time_simulated_s: dict[int, float] = field(default_factory=dict)
    """Step -> simulated step time with the traced durations (T per step), s."""
    step_time_ideal_s: dict[int, float] = field(default_factory=dict)
    """Step -> simulated step time with idealized durations (T_ideal per step), s."""
    worker_coords: dict[int, list[int]] = field(default_factory=dict)
    """Rank -> [dp_rank, stage] where the layout is known (empty without one)."""
    entry_skew_s: dict[int, float] = field(default_factory=dict)
    """Rank -> its largest step-entry skew over the steps: the last rank's step start minus
    its own, s (0 for the rank that entered last)."""
    by_segment_part: dict[str, float] = field(default_factory=dict)
    """GPU traces: 'host' and 'device' -> S leaving that part of every compute segment
    original (device: GPU-busy time; host: the rest). Empty for CPU traces."""
    gpu_busy_share: float | None = None
    """GPU traces: GPU-busy share of the compute segments (None for CPU traces)."""
    regime_change: dict | None = None
    """A job-wide change of the step time within the trace (analysis.regime), or None."""
    stage_balance: dict[int, float] = field(default_factory=dict)
    """Pipelines: stage -> the factor the ideal scales its compute by (mean over steps), so
    that every stage computes the mean stage's time (module doc); empty where the job is
    not a pipeline, or with the host model."""
    host_model: bool = False
    """True: the host and the device were modelled apart (stragglerlab.importers.
    general_host: launches, waits, gating ops); False: the chain of the device timeline
    alone (CPU traces, or a GPU trace whose launches or waits are not all traced)."""

    def to_dict(self) -> dict:
        """JSON-ready (keys as strings)."""
        d = self._fields()
        d[SUMMARY_KEY] = summary_of_general(d).to_json()
        return d

    def summary(self) -> WhatIfSummary:
        """This result in the names and units both what-if models share
        (stragglerlab.run.whatif_summary; whatif.json's `summary` block)."""
        return summary_of_general(self._fields(), notes=self.notes)

    def _fields(self) -> dict:
        """The fields, JSON-ready (keys as strings), without the summary block."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, dict) and k != "validity":
                d[k] = {str(a): b for a, b in v.items()}
        d["validity"] = self.validity.to_dict()
        return d


def _chain_length(ops: pd.DataFrame) -> pd.Series:
    """Per row, how many rows its rank has in its step (part of "the same work")."""
    return ops.groupby(["rank", "step"])["k"].transform("size")


def _ideal_gaps(ops: pd.DataFrame, length: pd.Series, stat: str = "mean") -> np.ndarray:
    return ops.groupby([ops["role"], ops["step"], ops["k"], length])["gap_s"] \
        .transform(stat).to_numpy()


def _stage_balance(ops: pd.DataFrame, ideal: np.ndarray) -> np.ndarray | None:
    """Per row, the factor that scales its stage's ideal compute in its step to the mean
    stage's (the module doc's pipelines); None where the ranks are not pipeline stages:
    no layout, one stage, or no matched P2P op between two stages."""
    stage = ops["stage"].to_numpy()
    if (stage < 0).any() or np.unique(stage).size < 2:
        return None
    rank = ops["rank"].to_numpy()
    stage_of = pd.Series(stage, index=rank).groupby(level=0).first()
    peer = ops["peer"].to_numpy()
    p2p = (ops["kind"].isin(P2P_KINDS).to_numpy() & (ops["group"].to_numpy() >= 0)
           & np.isin(peer, stage_of.index.to_numpy()))
    if not (stage_of.reindex(peer[p2p]).to_numpy() != stage[p2p]).any():
        return None
    per_rank = pd.Series(ideal).groupby([stage, ops["step"].to_numpy(), rank]).sum()
    per_stage = per_rank.groupby(level=[0, 1]).mean()
    target = per_stage.groupby(level=1).transform("mean")
    factor = (target / per_stage).where(per_stage > 0, 1.0)
    rows = pd.MultiIndex.from_arrays([stage, ops["step"].to_numpy()])
    return factor.reindex(rows).to_numpy(float)


def _ideal_transfers(ops: pd.DataFrame, length: pd.Series | None = None) -> np.ndarray:
    # The method's optype is one kind of work: Megatron's params-all-gather has
    # one message size. A general kind (all_gather) spans several (FSDP's root
    # gathers more than a block), so pooling them would "idealize" a large
    # message to a small one's time on a clean job. Same work = same kind and
    # message size where the trace gives sizes, else the same chain position
    # of the same role (as for the gaps), over every step.
    # A local op's transfer is its whole duration (op_model): its wait for peers no trace
    # matched is in it. Pooled with matched ops' transfers of the same work it lengthened
    # theirs (a clean pipeline with one unmatched pair read S 0.87), so the two pool apart.
    sized = (ops["in_nelems"] >= 0) | (ops["out_nelems"] >= 0)
    length = _chain_length(ops) if length is None else length
    where = np.where(sized, -1, ops["k"]), np.where(sized, -1, length)
    role = np.where(sized, -1, ops["role"])
    matched = ops["group"].to_numpy() >= 0
    med = ops.groupby([ops["kind"], ops["in_nelems"], ops["out_nelems"], role, *where,
                       matched])["transfer_s"].transform("median").to_numpy()
    return np.where(ops["kind"].to_numpy() == STEP_END, 0.0, med)


def _traced_steps(ops: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(traced step time per step, largest entry skew per rank), s. A step is measured as
    the simulation measures T: from the last rank's step start to the last rank's step end
    (the simulation starts every chain together, as if every rank entered when the last
    did; a rank that entered earlier waits at its first collective). A rank's step start
    is where its first row's gap begins."""
    first = (ops["k"] == 0).to_numpy()
    t0 = gap_ends(ops)[first] - ops["gap_s"].to_numpy(float)[first]
    starts = pd.DataFrame({"rank": ops["rank"].to_numpy()[first],
                           "step": ops["step"].to_numpy()[first], "t0": t0})
    ends = ops.loc[ops["kind"] == STEP_END, ["rank", "step", "start_s"]]
    b = starts.merge(ends, on=["rank", "step"])
    last_start = b.groupby("step")["t0"].transform("max")
    actual = b.groupby("step")["start_s"].max() - b.groupby("step")["t0"].max()
    skew = (last_start - b["t0"]).groupby(b["rank"]).max()
    return actual, skew


def _host_parts(ops: pd.DataFrame, length: pd.Series, stat: str
                ) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The host model's inputs (stragglerlab.importers.general_host), each (original,
    ideal) per row in seconds, the ideal over the same work as a gap's (NaN where the trace
    showed no sync or gating op there, or not on every rank doing the work); None where the
    host cannot be modelled: no host columns (CPU traces, tables written before them), a
    rank whose launches are not traced, or a rank's step with no wait for the device."""
    if "host_s" not in ops or not np.isfinite(ops["host_s"].to_numpy(float)).all():
        return None
    # The host model needs to see where the host rejoins the device: a step of a rank with
    # no wait for the device in the trace (its syncs not collected, or dropped from a
    # sampled file) would read as host time alone.
    joined = ops["sync_s"].notna().groupby([ops["rank"], ops["step"]]).any()
    if not joined.all():
        return None
    keys = [ops["role"], ops["step"], ops["k"], length]
    cols = ["device_s", *HOST_PARTS]
    orig = ops[cols].astype(float)
    orig["device_s"] = orig["device_s"].fillna(ops["gap_s"].astype(float))
    grouped = orig.groupby(keys)
    ideal = grouped.transform(stat)
    # A bound the ideal job keeps is one every rank doing the work shows: a sync or a
    # gating launch seen on some ranks only (the slow host's) bound only those ranks.
    everywhere = orig.notna().astype(np.int8).groupby(keys).transform("min")
    return {c: (orig[c].to_numpy(), np.where(everywhere[c].to_numpy(bool),
                                              ideal[c].to_numpy(), np.nan)) for c in cols}


def _segment_parts(ops: pd.DataFrame, length: pd.Series, stat: str
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """GPU traces: (host, device, ideal host, ideal device) part of every row's gap, s; the
    device part is the GPU-busy time inside the gap, the host part the rest; each ideal is
    over the same work as the gap's (_ideal_gaps). None for CPU traces (no busy time)."""
    busy = ops["busy_s"].to_numpy(float) if "busy_s" in ops else np.full(len(ops), np.nan)
    if not np.isfinite(busy).any():
        return None
    gap = ops["gap_s"].to_numpy(float)
    dev = np.where(np.isfinite(busy), np.clip(busy, 0.0, np.maximum(gap, 0.0)), 0.0)
    host = gap - dev
    keys = [ops["role"], ops["step"], ops["k"], length]
    ideal = pd.DataFrame({"h": host, "d": dev}).groupby(keys).transform(stat)
    return host, dev, ideal["h"].to_numpy(), ideal["d"].to_numpy()


def _evidence(ops: pd.DataFrame, actual: pd.Series, skew: pd.Series, busy_share: float | None,
              released: int, split: int, report: dict, host_model: bool) -> list[Finding]:
    """What the op table and the import saw that the model does not represent
    (stragglerlab.run.validity)."""
    out = []
    at = report.get("kernels_at_launch_share")
    at = at if isinstance(at, (int, float)) and not isinstance(at, bool) else None
    # Low busy time alone may be a sampled trace's dropped kernels: where the launches are
    # traced, the GPU ops must also mostly have started as soon as they were launched.
    if busy_share is not None and busy_share < LAUNCH_BOUND_BUSY \
            and (at is None or at >= AT_LAUNCH_SHARE):
        said = ("" if at is None else f"; {100 * at:.0f}% of the GPU ops started within "
                f"{report.get('at_launch_tol_us', 0):g} µs of their launch returning")
        out.append(Finding(reason=Reason.LAUNCH_BOUND, gates=not host_model, detail=(
            f"launch-bound: the GPU is busy {100 * busy_share:.0f}% of the compute segments "
            f"(under {100 * LAUNCH_BOUND_BUSY:.0f}%){said}; " + (
                "the segments are mostly host time, which the host model idealizes apart "
                "from the device's work" if host_model else
                "the segments are host time the GPU waited for, which the model idealizes "
                "as if it were GPU work (the launches are not in the trace, so the host "
                "model cannot run)"))))
    step = float(actual.max()) if len(actual) else 0.0
    worst = float(skew.max()) if len(skew) else 0.0
    if step > 0 and worst > ENTRY_SKEW_SHARE * step:
        r = int(skew.idxmax())
        out.append(Finding(reason=Reason.ENTRY_SKEW, detail=(
            f"step-entry skew: rank {r} entered a step {1e3 * worst:.2f} ms before the last "
            f"rank ({100 * worst / step:.0f}% of the step; the cause is in an untraced step "
            "before)")))
    comm = ops["kind"].to_numpy() != STEP_END
    local = float((ops["group"].to_numpy()[comm] < 0).mean()) if comm.any() else 0.0
    if local > LOCAL_OPS_SHARE:
        out.append(Finding(reason=Reason.LOCAL_OPS, detail=(
            f"{100 * local:.0f}% of the communication ops have no traced peer: their waits "
            "are taken as work")))
    bad = int(report.get("implausible_groups_unmatched", 0) or 0)
    if bad:
        out.append(Finding(reason=Reason.UNMATCHED_GROUPS, detail=(
            f"{bad} matched group(s) were implausible under the clock alignment "
            f"({report.get('align', '?')}) and were treated as local")))
    if released or split:
        out.append(Finding(reason=Reason.RELEASED_GROUPS, detail=(
            f"{released + split} group(s) issued in contradicting orders or steps were "
            "released early")))
    return out


def _regime(ops: pd.DataFrame, actual: pd.Series, settling: str | None):
    """The regime change of the traced steps (analysis.regime), with the time per step of
    each communication kind (transfers) and of `compute` (the segments) per rank."""
    rc = regime_change(list(actual.index), actual.to_numpy())
    if rc is None or (settling and rc.ratio < 1):
        return None
    comm = ops["kind"].to_numpy() != STEP_END
    kt = pd.concat([
        pd.DataFrame({"step": ops["step"], "rank": ops["rank"], "kind": COMPUTE,
                      "time_s": ops["gap_s"].clip(lower=0.0)}),
        pd.DataFrame({"step": ops["step"][comm], "rank": ops["rank"][comm],
                      "kind": ops["kind"][comm], "time_s": ops["transfer_s"][comm]})])
    kt = kt.groupby(["step", "rank", "kind"])["time_s"].sum().reset_index()
    return regime_change(list(actual.index), actual.to_numpy(), kt)


def _share(s: dict) -> dict:
    excess = {k: max(v - 1.0, 0.0) for k, v in s.items()}
    total = sum(excess.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in excess.items()}


def _on_replicas(ops: pd.DataFrame, rep: Replicas | None, ranks: list, dps: list
                     ) -> tuple[list, np.ndarray, np.ndarray] | None:
    """The rank and DP-rank scenarios as (names, replica, keep) for Replicas.simulate, or
    None (replay them on the whole table): no replicas to replay them on, or a layout
    whose DP ranks are not the replicas."""
    if rep is None:
        return None
    dp_of = {}
    if dps:
        first = ops.drop_duplicates("rank").set_index("rank")["dp_rank"]
        for r, d in first.items():
            if dp_of.setdefault(int(d), rep.replica_of_rank[int(r)]) \
                    != rep.replica_of_rank[int(r)]:
                return None
        if len(set(dp_of.values())) != len(dp_of):
            return None
    names = [("rank", r) for r in ranks] + [("dp", d) for d in dps]
    replica = np.array([rep.replica_of_rank[r] for r in ranks] + [dp_of[d] for d in dps],
                       dtype=np.int64)
    slot = np.array([rep.slot_of_rank[r] for r in ranks], dtype=np.int64)
    keep = np.concatenate([rep.slot[None, :] == slot[:, None],
                           np.ones((len(dps), rep.slot.size), bool)])
    return names, replica, keep


def whatif_general(ops: pd.DataFrame, compute_ideal: str = "mean", report: dict | None = None,
                   force: bool = False) -> GeneralWhatIf:
    """The what-if of an op table (see the module doc); `compute_ideal` in COMPUTE_IDEALS.
    `report` is the import's (import.json: evidence the gate names); `force` asserts the
    straggling verdict even where the gate withholds it (marked as forced)."""
    if compute_ideal not in COMPUTE_IDEALS:
        raise ValueError(f"compute_ideal {compute_ideal!r} is not one of {COMPUTE_IDEALS}")
    ops = ops.sort_values(["rank", "step", "k"], kind="stable", ignore_index=True)
    sched = schedule(ops)
    length = _chain_length(ops)
    hd = _host_parts(ops, length, compute_ideal)
    balance = None
    if hd is None:
        ideal_gap = _ideal_gaps(ops, length, compute_ideal)
        balance = _stage_balance(ops, ideal_gap)
        gap = (ops["gap_s"].to_numpy(float),
               ideal_gap if balance is None else ideal_gap * balance)
    else:
        gap = hd.pop("device_s")
    transfer = (ops["transfer_s"].to_numpy(float), _ideal_transfers(ops, length))
    step_end = ops["kind"].to_numpy() == STEP_END
    sim_kw = {} if hd is None else {"host": hd, "step_end": step_end}
    n = len(ops)
    kind = ops["kind"].to_numpy()
    rank = ops["rank"].to_numpy()
    comm_kinds = sorted(set(kind) - {STEP_END})
    ranks = sorted(set(rank.tolist()))
    has_layout = bool((ops["stage"] >= 0).all())
    dps = sorted(set(ops["dp_rank"].tolist())) if has_layout else []
    stages = sorted(set(ops["stage"].tolist())) if has_layout else []
    names, kg, kt = [], [], []

    def add(name, keep_gap, keep_transfer):
        names.append(name)
        kg.append(np.broadcast_to(keep_gap, n))
        kt.append(np.broadcast_to(keep_transfer, n))

    add("orig", True, True)
    add("ideal", False, False)
    add(("kind", COMPUTE), True, False)
    for t in comm_kinds:
        add(("kind", t), False, kind == t)
    for p in stages:
        m = ops["stage"].to_numpy() == p
        add(("stage", p), m, m)
    pairs = {"gap": gap, "transfer": transfer} | (hd or {})
    rep = replicas(ops, sched, [v[1] for v in pairs.values()])
    on_reps = _on_replicas(ops, rep, ranks, dps)
    if on_reps is None:  # every rank's and DP rank's scenario on the whole table
        for r in ranks:
            add(("rank", r), rank == r, rank == r)
        for d in dps:
            m = ops["dp_rank"].to_numpy() == d
            add(("dp", d), m, m)
    steps = simulate_masks(sched, gap, transfer, np.stack(kg, 1), np.stack(kt, 1), **sim_kw)
    if on_reps is not None:
        more, replica, keep = on_reps
        names += more
        steps = np.concatenate([steps, rep.simulate(pairs, replica, keep)], axis=1)
    col = {nm: i for i, nm in enumerate(names)}
    mean = steps.mean(axis=0)
    T, T_ideal = float(mean[col["orig"]]), float(mean[col["ideal"]])
    ratio = (lambda key: float(mean[col[key]] / T_ideal)) if T_ideal > 0 else (lambda _k: 1.0)
    by_kind = {COMPUTE: ratio(("kind", COMPUTE))} | {t: ratio(("kind", t)) for t in comm_kinds}
    by_rank = {r: ratio(("rank", r)) for r in ranks}
    by_dp = {d: ratio(("dp", d)) for d in dps} if has_layout else None
    by_stage = {p: ratio(("stage", p)) for p in stages} if has_layout else None
    if has_layout:
        first = ops.groupby("rank")[["dp_rank", "stage"]].first()
        coords = dict(zip(first.index.tolist(),
                          zip(first["dp_rank"].tolist(), first["stage"].tolist())))
        score = {r: min(by_dp[coords[r][0]], by_stage[coords[r][1]]) for r in ranks}
    else:
        score = dict(by_rank)
    top = sorted(ranks, key=lambda r: (-score[r], r))[:max(1, math.ceil(TOP_WORKERS * len(ranks)))]
    fix_names, fg = [], []
    fix_names.append("fixW")
    fg.append(~np.isin(rank, top))
    if has_layout and len(stages) > 1:
        fix_names.append("fixS")
        fg.append(ops["stage"].to_numpy() != stages[-1])
    fix = simulate_masks(sched, gap, transfer, np.stack(fg, 1), np.stack(fg, 1),
                         **sim_kw).mean(axis=0)
    parts = _segment_parts(ops, length, compute_ideal)
    if parts is not None and balance is not None:  # the parts of the balanced ideal
        parts = (parts[0], parts[1], parts[2] * balance, parts[3] * balance)
    by_part, busy_share = {}, None
    if hd is not None and T_ideal > 0:  # host parts original / device parts original
        t = np.repeat(transfer[1][:, None], 2, axis=1)
        both = {k: np.stack([v[0] if k in HOST_SIDE else v[1],
                             v[1] if k in HOST_SIDE else v[0]], 1) for k, v in hd.items()}
        g = np.stack([gap[1], gap[0]], 1)
        part_T = simulate(sched, g, t, both, step_end).mean(axis=0)
        by_part = {HOST: float(part_T[0] / T_ideal), DEVICE: float(part_T[1] / T_ideal)}
    if parts is not None and T_ideal > 0 and hd is None:
        host, dev, ideal_host, ideal_dev = parts
        g = np.stack([host + ideal_dev, ideal_host + dev], 1)
        t = np.repeat(transfer[1][:, None], 2, axis=1)
        part_T = simulate(sched, g, t).mean(axis=0)
        by_part = {HOST: float(part_T[0] / T_ideal), DEVICE: float(part_T[1] / T_ideal)}
    if parts is not None:
        total = np.maximum(ops["gap_s"].to_numpy(float), 0.0).sum()
        busy_share = float(parts[1].sum() / total) if total > 0 else None
    excess = T - T_ideal

    def m_of(t_fix: float) -> float:
        return float((T - t_fix) / excess) if excess > 1e-12 else 0.0

    m_w = m_of(float(fix[0]))
    m_s = (m_of(float(fix[1])) if len(stages) > 1 else 0.0) if has_layout else None
    actual_by_step, skew = _traced_steps(ops)
    actual = float(actual_by_step.mean())
    S = T / T_ideal if T_ideal > 0 else 1.0
    discrepancy = actual / T - 1.0 if T > 0 else 0.0
    validity = judge(discrepancy, _evidence(ops, actual_by_step, skew, busy_share,
                                            sched.released, sched.split_steps, report or {},
                                            hd is not None),
                     force=force)
    notes = []
    if sched.released:
        notes.append(f"{sched.released} collective group(s) were issued in orders that "
                     "contradict each other across ranks (matched by order without sequence "
                     "numbers, or events missing from the trace); each was released when its "
                     "first members arrived, the rest of its members ran as local ops")
    if sched.split_steps:
        notes.append(f"{sched.split_steps} group(s) fell in different steps on different "
                     "ranks and were treated as local ops")
    settling = settling_note(list(actual_by_step.index), actual_by_step.to_numpy())
    if settling:  # as on our own traces (analysis/whatif.py): reported, still averaged in
        notes.append(settling)
    per_step = [float(steps[i, col["orig"]] / steps[i, col["ideal"]])
                if steps[i, col["ideal"]] > 0 else 1.0 for i in range(len(sched.steps))]
    regime = _regime(ops, actual_by_step, settling)
    notes += [n for n in (regime.note(list(actual_by_step.index), per_step) if regime else None,
                          low_step_note(list(actual_by_step.index), per_step, regime)) if n]
    return GeneralWhatIf(
        T=T, T_ideal=T_ideal, S=S, waste=1.0 - 1.0 / S if S > 0 else 0.0,
        straggling=validity.verdict(S), actual_step_s=actual,
        discrepancy=discrepancy, validity=validity,
        per_step={int(s): float(steps[i, col["orig"]] / steps[i, col["ideal"]])
                  if steps[i, col["ideal"]] > 0 else 1.0 for i, s in enumerate(sched.steps)},
        by_kind=by_kind, by_rank=by_rank, by_dp=by_dp, by_stage=by_stage,
        kind_share=_share(by_kind), rank_share=_share(by_rank), worker_score=score,
        top_workers=[int(r) for r in top], M_W=m_w, M_S=m_s,
        released_groups=sched.released, compute_ideal=compute_ideal, notes=notes,
        step_time_actual_s={int(s): float(t) for s, t in actual_by_step.items()},
        step_time_simulated_s={int(s): float(steps[i, col["orig"]])
                               for i, s in enumerate(sched.steps)},
        step_time_ideal_s={int(s): float(steps[i, col["ideal"]])
                           for i, s in enumerate(sched.steps)},
        worker_coords={int(r): list(coords[r]) for r in ranks} if has_layout else {},
        entry_skew_s={int(r): float(v) for r, v in skew.items()},
        regime_change=None if regime is None else regime.to_dict(), host_model=hd is not None,
        stage_balance={} if balance is None else {
            int(p): float(f) for p, f in
            pd.Series(balance).groupby(ops["stage"].to_numpy()).mean().items()},
        by_segment_part=by_part, gpu_busy_share=busy_share)
