"""What a synthetic job is: its shape, timing and injected faults (`SyntheticConfig`).

The simulation that turns it into a trace is `stragglerlab.workloads.synthetic`,
which re-exports these names:

    from stragglerlab.workloads.synthetic import SlowLink, SlowWorker, SyntheticConfig
    cfg = SyntheticConfig(dp_size=2, pp_size=4,
                          slow_workers=(SlowWorker(dp_rank=1, stage=2, factor=1.5),),
                          slow_links=(SlowLink(dp_rank=0, stage=1, delay_s=0.003),))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SEQ_SQ_SUM = 4 * 512.0**2
"""Mean sum(seq_len^2) of a microbatch with sequence imbalance (four 512-token sequences)."""


@dataclass(frozen=True)
class SlowWorker:
    """One worker whose compute runs slower for a range of steps (ground truth 'slow-worker')."""

    dp_rank: int
    """Data-parallel rank of the victim."""
    stage: int
    """Pipeline stage of the victim."""
    factor: float
    """Multiplier on its forward, backward and optimizer durations (dimensionless, > 0)."""
    first_step: int = 0
    """First slowed step (inclusive, steps count from 0)."""
    last_step: int | None = None
    """Last slowed step (inclusive); None = to the end."""


@dataclass(frozen=True)
class SlowLink:
    """One worker whose P2P sends (both_ways: and receives) arrive late for a range of steps
    (ground truth 'net-delay'; both ways 'net-throttle', as a tc throttle on its veth)."""

    dp_rank: int
    """Data-parallel rank of the sender."""
    stage: int
    """Pipeline stage of the sender."""
    delay_s: float
    """Added to every pair it sends, s (> 0)."""
    first_step: int = 0
    """First delayed step (inclusive)."""
    last_step: int | None = None
    """Last delayed step (inclusive); None = to the end."""
    both_ways: bool = False
    """Also delay every pair it receives."""


@dataclass
class SyntheticConfig:
    """Shape, timing and faults of a synthetic job."""

    dp_size: int = 2
    """Data-parallel degree."""
    pp_size: int = 4
    """Pipeline-parallel degree (stages)."""
    n_microbatches: int = 4
    """Microbatches per step."""
    n_steps: int = 8
    """Traced steps."""
    seed: int = 0
    """Seed of the noise: the same config gives the same trace."""
    forward_s: float | Sequence[float] = 0.02
    """Forward compute per microbatch, s; a scalar or one value per stage."""
    backward_s: float | Sequence[float] | None = None
    """Backward compute per microbatch, s; scalar or per stage; None = 2 x forward."""
    p2p_latency_s: float = 3e-4
    """Transfer time of one P2P send/recv pair, s."""
    dp_collective_s: float = 5e-3
    """Transfer time of params-all-gather and grads-reduce-scatter, s."""
    embedding_s: float = 1e-3
    """Transfer time of embedding-grads-all-reduce, s."""
    layernorm_s: float = 4e-5
    """Duration of layernorm-grads-all-reduce, s."""
    clip_s: float = 5e-4
    """Transfer time of optimizer-clip-main-grad, s."""
    optimizer_s: float = 8e-3
    """Optimizer step duration, s."""
    jitter: float = 0.02
    """Relative noise (standard deviation / mean) of every duration, dimensionless."""
    jitter_dist: str = "lognormal"
    """'lognormal' (mean-1 multiplicative) or 'normal' (1 + N(0, jitter), clipped at 0.01)."""
    launch_gap_s: tuple[float, float] = (5e-6, 5e-5)
    """CPU gap before each op, uniform in [low, high], s."""
    slow_workers: Sequence[SlowWorker] = field(default_factory=tuple)
    """Workers whose compute is slowed."""
    slow_links: Sequence[SlowLink] = field(default_factory=tuple)
    """Workers whose P2P sends are delayed (ground truth 'net-delay')."""
    last_stage_factor: float = 1.0
    """Multiplier on the last stage's forward and backward (stage partitioning imbalance)."""
    seq_imbalance_sigma: float = 0.0
    """Sequence-length imbalance: each microbatch's sum(seq_len^2) is lognormal with this
    sigma (mean 1 x `SEQ_SQ_SUM`), the same microbatch on every stage, and its forward and
    backward durations scale with it (attention cost, paper Fig. 9). 0: fixed lengths, no
    `seq_len_sq_sum` column."""
    trial_name: str = "synthetic"
    """Name written into the job meta."""


def overlapping_slow_workers(workers: Sequence[SlowWorker], n_steps: int
                             ) -> tuple[SlowWorker, SlowWorker] | None:
    """The first two slow workers on one worker (DP rank, stage) whose step ranges overlap,
    else None. There the factors would multiply, and the ground truth would record each
    fault measuring their product: the synth CLI and the simulator refuse such a pair."""
    last = [n_steps - 1 if w.last_step is None else w.last_step for w in workers]
    for i, a in enumerate(workers):
        for j in range(i + 1, len(workers)):
            b = workers[j]
            if (a.dp_rank, a.stage) == (b.dp_rank, b.stage) \
                    and a.first_step <= last[j] and b.first_step <= last[i]:
                return a, b
    return None
