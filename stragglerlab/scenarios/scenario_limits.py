"""Bounds of a scenario config: what `stragglerlab train` can run on this host.

`Scenario.check` asks `limit_problems` first, so a config that could not run
(or would allocate without bound before failing) is refused before anything
starts: no Ray, no rank, no progress line.

* World size: every rank is its own process with a CPU quota of at least
  MIN_CORES_PER_RANK, so dp * pp is at most host_cores() / MIN_CORES_PER_RANK
  (20 ranks on 2 cores), and never above MAX_RANKS.
* Timeouts, CPU shares, learning rate, clip norm and sequence-length spread
  are finite and in range (a NaN timeout would never fire; a NaN CPU share
  only fails after Ray started).
* Model and run sizes: layers, hidden size, vocabulary, sequence length,
  microbatches, steps, threads and the model's parameter count are capped
  (a laptop-sized testbed: the tiny GPT, tens of steps).
"""

from __future__ import annotations

import math
import os

MIN_CORES_PER_RANK = 0.1
"""Smallest CPU share a rank can make progress on (cgroup quotas below it starve torch)."""
MAX_RANKS = 1024
"""Largest dp * pp on any host."""
MAX_STEPS = 1_000_000
MAX_MICROBATCHES = 10_000
MAX_LAYERS = 1024
MAX_HIDDEN = 16_384
MAX_VOCAB = 1_000_000
MAX_SEQ_LEN = 1_000_000
MAX_MODEL_PARAMS = 500_000_000
"""Largest model (all stages): ~2 GB of fp32 weights, 8 GB with Adam state."""
MAX_TIMEOUT_S = 86_400.0
MAX_THREADS_PER_RANK = 256
MAX_SEED = 2**32 - 1
"""numpy's seed range."""


def host_cores() -> int:
    """Cores this process may run on (affinity first, then cpu_count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def max_ranks(cores: int | None = None) -> int:
    """Most ranks this host can place: MIN_CORES_PER_RANK each, at most MAX_RANKS."""
    cores = host_cores() if cores is None else cores
    return min(MAX_RANKS, int(cores / MIN_CORES_PER_RANK + 1e-9))


def _finite(value: float, lo: float, hi: float, lo_open: bool = False) -> bool:
    return math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi


def model_params(n_layers: int, hidden: int, vocab: int, max_seq_len: int) -> int:
    """Rough parameter count of the tiny GPT: 12 h^2 per block plus the embeddings."""
    return 12 * n_layers * hidden * hidden + (vocab + max_seq_len) * hidden


def limit_problems(scenario) -> list[str]:
    """Problems with a scenario's sizes and numbers (empty when it can run here)."""
    p, m, d, r = scenario.parallel, scenario.model, scenario.data, scenario.run
    out: list[str] = []
    cap = max_ranks()
    if p.dp >= 1 and p.pp >= 1 and p.dp * p.pp > cap:
        out.append(f"parallel.dp*parallel.pp = {p.dp}*{p.pp} = {p.dp * p.pp:,} ranks is over "
                   f"the {cap} this host can place ({host_cores()} cores, at least "
                   f"{MIN_CORES_PER_RANK} core per rank); use fewer ranks")
    for name, value, hi in (("parallel.microbatches", p.microbatches, MAX_MICROBATCHES),
                            ("model.n_layers", m.n_layers, MAX_LAYERS),
                            ("model.hidden", m.hidden, MAX_HIDDEN),
                            ("model.vocab", m.vocab, MAX_VOCAB),
                            ("model.max_seq_len", m.max_seq_len, MAX_SEQ_LEN),
                            ("run.steps", r.steps, MAX_STEPS),
                            ("run.planned_gc_every", r.planned_gc_every, MAX_STEPS),
                            ("run.threads_per_rank", r.threads_per_rank, MAX_THREADS_PER_RANK)):
        if value > hi:
            out.append(f"{name} = {value:,} is over the limit of {hi:,}")
    if m.n_layers < 1:
        out.append("model.n_layers must be >= 1")
    if not out and m.hidden >= 1 and m.vocab >= 1:
        n = model_params(m.n_layers, m.hidden, m.vocab, m.max_seq_len)
        if n > MAX_MODEL_PARAMS:
            out.append(f"the model has about {n:,} parameters, over the limit of "
                       f"{MAX_MODEL_PARAMS:,}; shrink model.n_layers/hidden/vocab")
    if p.layers_per_stage is not None and any(x > MAX_LAYERS for x in p.layers_per_stage):
        out.append(f"parallel.layers_per_stage entries must be <= {MAX_LAYERS}")
    if not 0 <= r.seed <= MAX_SEED:
        out.append(f"run.seed must be in [0, {MAX_SEED}]")
    for name, value, lo, hi in (("run.collective_timeout_s", r.collective_timeout_s, 0.0,
                                 MAX_TIMEOUT_S),
                                ("run.lr", r.lr, 0.0, 1e3),
                                ("run.clip_norm", r.clip_norm, 0.0, 1e9)):
        if not _finite(value, lo, hi, lo_open=True):
            out.append(f"{name} = {value} must be a finite number in ({lo:g}, {hi:g}]")
    if not _finite(d.longtail_sigma, 0.0, 5.0):
        out.append(f"data.longtail_sigma = {d.longtail_sigma} must be in [0, 5]")
    if r.cores_per_rank is not None and not _finite(r.cores_per_rank, MIN_CORES_PER_RANK,
                                                    float(host_cores())):
        out.append(f"run.cores_per_rank = {r.cores_per_rank} must be a finite number in "
                   f"[{MIN_CORES_PER_RANK}, {host_cores()}] (this host's cores)")
    return out
