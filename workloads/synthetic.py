"""Synthetic traces: a small discrete-event simulation of a DP x PP (1F1B) training job.

No torch, no Ray: schema traces with a known ground truth for the analysis
tests, the README quickstart and detector validation. Each (dp_rank, stage)
worker walks the 1F1B actions of workloads.schedule; P2P is blocking (a pair
completes at the later post plus the latency, a combined op when both halves
have). params-all-gather (synchronized across DP ranks) opens the step; the
tail runs in the reference trace's order: gc (duration 0, at the end of the
last backward, before the final send) -> layernorm-grads-all-reduce ->
embedding-grads-all-reduce (first + last stage, per DP rank) ->
grads-reduce-scatter (across the DP ranks of a stage) ->
optimizer-clip-main-grad (all workers) -> optimizer. With dp_size 1 the DP
collectives are left out. Each op launches 5-50 us after the previous one
(the CPU work the what-if analysis calls launch delay).

Conventions of the reference trace: global rank = stage * dp_size + dp_rank
(Megatron's dp-major order with tp = 1); start_ts relative to the step start
(the earliest op of the step is at 0); steps numbered 0..n_steps-1; rows sorted
by (step, rank, optype, seq_id). A slow worker's factor multiplies its forward,
backward and optimizer durations.

    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=4))
    stragglerlab synth --out DIR --dp 2 --pp 4 --microbatches 4 --steps 8 \\
        --slow 1,1,1.5          # writes DIR/trace.parquet, DIR/meta.yaml, DIR/faults.json
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import OPTYPE_VALUES
from stragglerlab.trace.schema import OpType as Op
from stragglerlab.workloads.schedule import Action, ActionKind, Direction, one_f_one_b
from stragglerlab.workloads.synthetic_config import (  # re-exported: the synthetic job's API
    SEQ_SQ_SUM,
    SlowLink,
    SlowWorker,
    SyntheticConfig,
    overlapping_slow_workers,
)

__all__ = ["SEQ_SQ_SUM", "SlowLink", "SlowWorker", "SyntheticConfig", "ground_truth",
           "synthesize_trace", "write_run"]

_F, _B = Direction.FORWARD, Direction.BACKWARD
_P2P_OPTYPE = {(_F, True): Op.FORWARD_SEND, (_F, False): Op.FORWARD_RECV,
               (_B, True): Op.BACKWARD_SEND, (_B, False): Op.BACKWARD_RECV}


def _per_stage(value: float | Sequence[float], pp: int, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        return np.full(pp, float(arr))
    if arr.shape != (pp,):
        raise ValueError(f"{name} needs one value or {pp} (one per stage), got {len(arr)}")
    return arr


class _Job:
    """The simulation state: per stage arrays over [n_steps, dp_size]."""

    def __init__(self, cfg: SyntheticConfig) -> None:
        if cfg.jitter_dist not in ("lognormal", "normal"):
            raise ValueError(f"jitter_dist must be 'lognormal' or 'normal', got {cfg.jitter_dist}")
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.shape = (cfg.n_steps, cfg.dp_size)
        pp = cfg.pp_size
        fwd = _per_stage(cfg.forward_s, pp, "forward_s")
        bwd = 2 * fwd if cfg.backward_s is None else _per_stage(cfg.backward_s, pp, "backward_s")
        imbalance = np.ones(pp)
        imbalance[-1] = cfg.last_stage_factor
        self.fwd, self.bwd = fwd * imbalance, bwd * imbalance
        self.slow = np.ones((pp, *self.shape))  # [stage, step, dp]
        for w in cfg.slow_workers:
            last = cfg.n_steps - 1 if w.last_step is None else w.last_step
            if not (0 <= w.dp_rank < cfg.dp_size and 0 <= w.stage < pp and w.factor > 0
                    and 0 <= w.first_step <= last < cfg.n_steps):
                raise ValueError(f"slow worker {w} outside dp_size={cfg.dp_size}, pp_size={pp}, "
                                 f"steps 0..{cfg.n_steps - 1}, or factor <= 0")
            self.slow[w.stage, w.first_step:last + 1, w.dp_rank] *= w.factor
        pair = overlapping_slow_workers(cfg.slow_workers, cfg.n_steps)
        if pair:  # factors would multiply; ground_truth could not say what each measured
            raise ValueError(f"slow workers {pair[0]} and {pair[1]} slow one worker in the same "
                             "steps; give one SlowWorker per worker and step range")
        self.link_delay = np.zeros((pp, *self.shape))  # [sender stage, step, dp], s
        self.recv_delay = np.zeros((pp, *self.shape))  # [receiver stage, step, dp], s
        for link in cfg.slow_links:
            last = cfg.n_steps - 1 if link.last_step is None else link.last_step
            if not (0 <= link.dp_rank < cfg.dp_size and 0 <= link.stage < pp
                    and link.delay_s > 0 and 0 <= link.first_step <= last < cfg.n_steps):
                raise ValueError(f"slow link {link} outside dp_size={cfg.dp_size}, "
                                 f"pp_size={pp}, steps 0..{cfg.n_steps - 1}, or delay <= 0")
            self.link_delay[link.stage, link.first_step:last + 1, link.dp_rank] += link.delay_s
            if link.both_ways:
                self.recv_delay[link.stage, link.first_step:last + 1, link.dp_rank] += \
                    link.delay_s
        # Per microbatch [mb, step, dp]: its cost multiplier, mean 1, on every stage it visits.
        sigma = cfg.seq_imbalance_sigma
        self.mb_cost = (np.exp(self.rng.normal(-sigma * sigma / 2, sigma,
                                               (cfg.n_microbatches, *self.shape)))
                        if sigma > 0 else np.ones((cfg.n_microbatches, *self.shape)))
        self.t = [np.zeros(self.shape) for _ in range(pp)]  # when each worker is free
        self.seq = [dict.fromkeys(OPTYPE_VALUES, 0) for _ in range(pp)]
        self.records: list[tuple[int, int, int, int, int]] = []  # stage, seq, mb, mc, gmc
        self.optypes: list[str] = []
        self.starts: list[np.ndarray] = []
        self.durations: list[np.ndarray] = []
        self.seq_sq: list[np.ndarray] = []  # sum(seq_len^2) of forward computes, else NaN
        self.post: list[np.ndarray | None] = [None] * pp  # post time of a pending P2P action
        self.posts: dict[tuple, dict[bool, np.ndarray]] = {}  # (dir, sender, mb) -> {send?: t}
        self.done: dict[tuple, np.ndarray] = {}  # (dir, sender, mb) -> completion time

    def noise(self, shape: tuple[int, ...] | None = None) -> np.ndarray:
        shape = self.shape if shape is None else shape
        j = self.cfg.jitter
        if self.cfg.jitter_dist == "lognormal":
            return np.exp(self.rng.normal(-j * j / 2, j, shape))
        return np.maximum(1 + self.rng.normal(0, j, shape), 0.01)

    def gap(self) -> np.ndarray:
        return self.rng.uniform(*self.cfg.launch_gap_s, self.shape)

    def record(self, stage: int, op: Op, start, duration, mb: int = -1) -> None:
        """Append one op (arrays over [step, dp]) with its schema ids."""
        compute = op in (Op.FORWARD_COMPUTE, Op.BACKWARD_COMPUTE)
        mc = 0 if compute or op in (Op.PARAMS_ALL_GATHER, Op.GRADS_REDUCE_SCATTER) else -1
        gmc = stage if compute else -1
        seq = self.seq[stage][op.value]
        self.seq[stage][op.value] = seq + 1
        self.records.append((stage, seq, mb, mc, gmc))
        self.optypes.append(op.value)
        self.starts.append(np.broadcast_to(start, self.shape))
        self.durations.append(np.broadcast_to(duration, self.shape))
        sq = SEQ_SQ_SUM * self.mb_cost[mb] if op is Op.FORWARD_COMPUTE else np.nan
        self.seq_sq.append(np.broadcast_to(sq, self.shape))

    def launch(self, stage: int) -> np.ndarray:
        """Start time of the worker's next op: when it is free plus a CPU gap."""
        return self.t[stage] + self.gap()

    def run_compute(self, stage: int, kind: ActionKind, mb: int) -> None:
        forward = kind is ActionKind.FORWARD
        op = Op.FORWARD_COMPUTE if forward else Op.BACKWARD_COMPUTE
        start = self.launch(stage)
        dur = (self.fwd if forward else self.bwd)[stage] * self.slow[stage] * self.mb_cost[mb] \
            * self.noise()
        self.record(stage, op, start, dur, mb)
        self.t[stage] = start + dur
        if not forward and mb == self.cfg.n_microbatches - 1:
            # The planned-GC marker sits at the end of the last backward, before its send.
            gc_start = self.t[stage] + 1e-6
            self.record(stage, Op.GC, gc_start, 0.0, mb=0)
            self.t[stage] = gc_start

    def run_pipeline(self) -> None:
        """Walk every stage's 1F1B actions with blocking P2P until all are done."""
        pp = self.cfg.pp_size
        actions = [one_f_one_b(s, pp, self.cfg.n_microbatches) for s in range(pp)]
        pos = [0] * pp
        while any(pos[s] < len(actions[s]) for s in range(pp)):
            progressed = False
            for s in range(pp):
                while pos[s] < len(actions[s]) and self.try_action(s, actions[s][pos[s]]):
                    pos[s] += 1
                    progressed = True
            if not progressed:
                raise RuntimeError(f"pipeline deadlock at action positions {pos}")

    def try_action(self, s: int, a: Action) -> bool:
        """Run action a of stage s; False while one of its P2P halves waits for the peer.

        A half completes at the later post of its pair plus the latency, the
        action when all its halves have; each half is recorded with the action's
        post time and duration (a combined op gives two records with one time).
        """
        if a.is_compute:
            self.run_compute(s, a.kind, a.microbatch)
            return True
        keys = [(h.direction, s if h.is_send else h.peer_stage(s), h.microbatch)
                for h in a.halves]
        if self.post[s] is None:
            self.post[s] = self.launch(s)
            for h, k in zip(a.halves, keys):
                self.posts.setdefault(k, {})[h.is_send] = self.post[s]
        if not all(len(self.posts[k]) == 2 for k in keys):
            return False
        for k in keys:
            if k not in self.done:
                both = np.maximum(self.posts[k][True], self.posts[k][False])
                # k = (direction, sender stage, microbatch): a slow link delays its sends
                # (and, both ways, what it receives).
                to = k[1] + (1 if k[0] == _F else -1)
                self.done[k] = both + self.cfg.p2p_latency_s * self.noise() \
                    + self.link_delay[k[1]] + self.recv_delay[to]
        post, end = self.post[s], np.max([self.done[k] for k in keys], axis=0)
        for h in a.halves:
            self.record(s, _P2P_OPTYPE[h.direction, h.is_send], post, end - post)
        self.t[s], self.post[s] = end, None
        return True

    def run_step_head(self) -> None:
        """Step start: every worker gets going; params-all-gather across DP ranks."""
        for s in range(self.cfg.pp_size):
            self.t[s] = self.gap()
        if self.cfg.dp_size > 1:
            self.dp_collective(Op.PARAMS_ALL_GATHER)

    def dp_collective(self, op: Op) -> None:
        transfer = self.cfg.dp_collective_s * self.noise((self.cfg.n_steps, 1))
        for s in range(self.cfg.pp_size):
            start = self.launch(s)
            end = start.max(axis=1, keepdims=True) + transfer
            self.record(s, op, start, end - start)
            self.t[s] = np.broadcast_to(end, self.shape).copy()

    def run_step_tail(self) -> None:
        """gc already recorded; layernorm, embedding, DP grads, clip, optimizer."""
        cfg, pp = self.cfg, self.cfg.pp_size
        for s in range(pp):
            start = self.launch(s)
            dur = cfg.layernorm_s * self.noise()
            self.record(s, Op.LAYERNORM_GRADS_ALL_REDUCE, start, dur)
            self.t[s] = start + dur
        ends = sorted({0, pp - 1})
        starts = {s: self.launch(s) for s in ends}
        emb_end = np.max([starts[s] for s in ends], axis=0) + cfg.embedding_s * self.noise()
        for s in ends:
            self.record(s, Op.EMBEDDING_GRADS_ALL_REDUCE, starts[s], emb_end - starts[s])
            self.t[s] = emb_end
        if cfg.dp_size > 1:
            self.dp_collective(Op.GRADS_REDUCE_SCATTER)
        starts = {s: self.launch(s) for s in range(pp)}
        latest = np.max([starts[s].max(axis=1) for s in range(pp)], axis=0)[:, None]
        clip_end = latest + cfg.clip_s * self.noise((cfg.n_steps, 1))
        for s in range(pp):
            self.record(s, Op.OPTIMIZER_CLIP_MAIN_GRAD, starts[s], clip_end - starts[s])
            start = clip_end + self.gap()
            self.record(s, Op.OPTIMIZER, start, cfg.optimizer_s * self.slow[s] * self.noise())

    def frame(self) -> pd.DataFrame:
        """All recorded ops as a schema DataFrame, start_ts relative to each step's start."""
        (n_steps, dp), n_rec = self.shape, len(self.records)
        start = np.stack(self.starts)  # [record, step, dp]
        start = start - start.min(axis=(0, 2))[None, :, None]
        ids = np.repeat(np.array(self.records, dtype=np.int64), n_steps * dp, axis=0)
        dp_rank = np.tile(np.arange(dp, dtype=np.int64), n_rec * n_steps)
        df = pd.DataFrame({
            "rank": ids[:, 0] * dp + dp_rank, "dp_rank": dp_rank, "stage": ids[:, 0],
            "step": np.tile(np.repeat(np.arange(n_steps, dtype=np.int64), dp), n_rec),
            "optype": pd.Categorical(np.repeat(self.optypes, n_steps * dp),
                                     categories=list(OPTYPE_VALUES)),
            "start_ts": start.ravel(), "duration": np.stack(self.durations).ravel(),
            "seq_id": ids[:, 1], "mb_id": ids[:, 2], "mc": ids[:, 3], "gmc": ids[:, 4],
        })
        if self.cfg.seq_imbalance_sigma > 0:
            df["seq_len_sq_sum"] = np.stack(self.seq_sq).ravel()
        name_rank = np.argsort(np.argsort(np.array(OPTYPE_VALUES)))  # optype in name order
        by_name = name_rank[df["optype"].cat.codes.to_numpy()]
        order = np.lexsort((df["seq_id"], by_name, df["rank"], df["step"]))
        return df.iloc[order].reset_index(drop=True)


def synthesize_trace(config: SyntheticConfig) -> tuple[pd.DataFrame, JobMeta]:
    """Simulate the job; returns the trace (schema columns, int64/float64) and its job meta."""
    cfg = config
    if min(cfg.dp_size, cfg.pp_size, cfg.n_microbatches, cfg.n_steps) < 1:
        raise ValueError("dp_size, pp_size, n_microbatches and n_steps must be >= 1")
    job = _Job(cfg)
    job.run_step_head()
    job.run_pipeline()
    job.run_step_tail()
    meta = JobMeta(dp_size=cfg.dp_size, pp_size=cfg.pp_size, trial_name=cfg.trial_name)
    return job.frame(), meta


def _compute_mean(df: pd.DataFrame, mask: np.ndarray) -> float:
    compute = df["optype"].isin([Op.FORWARD_COMPUTE.value, Op.BACKWARD_COMPUTE.value]).to_numpy()
    return float(df.loc[mask & compute, "duration"].mean())


def ground_truth(df: pd.DataFrame, config: SyntheticConfig) -> list[dict]:
    """faults.json records (design.md §3) of the injected faults; [] for a clean job.

    Slow worker: measured factor = the victim's mean compute duration / that of
    the other DP ranks of its stage in the same steps (other workers when
    dp_size is 1). Stage imbalance ("stage-imbalance", when last_stage_factor
    != 1): the last stage's mean compute duration / the other stages'.
    """
    cfg, faults = config, []
    step, stage, dp = (df[c].to_numpy() for c in ("step", "stage", "dp_rank"))

    def record(kind, cells, first, last, factor, victim, peers) -> None:
        faults.append({
            "kind": kind,
            "targets": [{"rank": p * cfg.dp_size + d, "dp_rank": d, "stage": p} for d, p in cells],
            "first_step": first,
            "last_step": last,
            "requested": {"factor": factor},
            "measured": {"factor": round(_compute_mean(df, victim) / _compute_mean(df, peers), 4)},
        })

    for w in cfg.slow_workers:
        last = cfg.n_steps - 1 if w.last_step is None else w.last_step
        steps = (step >= w.first_step) & (step <= last)
        victim = (stage == w.stage) & (dp == w.dp_rank)
        peers = steps & ~victim & ((stage == w.stage) if cfg.dp_size > 1 else True)
        record("slow-worker", [(w.dp_rank, w.stage)], w.first_step, w.last_step, w.factor,
               steps & victim, peers)
    for link in cfg.slow_links:
        faults.append({
            "kind": "net-throttle" if link.both_ways else "net-delay",
            "targets": [{"rank": link.stage * cfg.dp_size + link.dp_rank,
                         "dp_rank": link.dp_rank, "stage": link.stage}],
            "first_step": link.first_step, "last_step": link.last_step,
            "requested": {"delay_ms": link.delay_s * 1000.0}, "measured": {}})
    if cfg.last_stage_factor != 1.0 and cfg.pp_size > 1:
        last_stage = stage == cfg.pp_size - 1
        record("stage-imbalance", [(d, cfg.pp_size - 1) for d in range(cfg.dp_size)], 0, None,
               cfg.last_stage_factor, last_stage, ~last_stage)
    return faults


def write_run(config: SyntheticConfig, out: str | Path) -> list[dict]:
    """Synthesize and write out/trace.parquet, out/meta.yaml, out/faults.json; returns faults."""
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.trace.trace_io import write_trace

    folder = RunFolder(path=Path(out))
    df, meta = synthesize_trace(config)
    faults = ground_truth(df, config)
    write_trace(df, meta, folder.trace_path)
    folder.write_meta(meta)
    folder.write_faults(faults)
    return faults
