"""The closed sets a scenario config names: sequence-length distributions, profilers,
pacing rates, workloads, placements and backends (stragglerlab.scenarios.scenario's dataclasses use
them; one vocabulary per concept)."""

from __future__ import annotations

import enum


class LengthDistribution(str, enum.Enum):
    """How sequence lengths are drawn before packing."""

    FIXED = "fixed"
    UNIFORM = "uniform"
    LONGTAIL = "longtail"  # lognormal: most sequences short, a few very long


class Profiler(str, enum.Enum):
    """Profiler run beside our tracer; kineto = torch.profiler, per-rank traces in kineto/."""

    OFF = "off"
    KINETO = "kineto"


class PaceRate(str, enum.Enum):
    """What a paced compute op of our engine is padded to (`run.pace_rate`)."""

    CPU = "cpu"  # its own thread CPU time over the rank's share (workloads/pacing.py)
    # Its modelled work at one warm-up rate per unit of work for that op kind, the largest
    # over ranks and stages: every rank runs at one fixed rate, as GPUs do; a stage's
    # compute follows the partition's modelled cost, a microbatch's its attention's sum(s^2).
    WARMUP = "warmup"
    # The default: the same as warmup, under a name a config can leave unchanged.
    AUTO = "auto"


class Workload(str, enum.Enum):
    """What trains: our Megatron-style engine, or a job on one of torch's own wrappers.

    The torch workloads (workloads/torch_*.py) carry none of our op tracing: only
    torch.profiler traces them (`run.profiler: kineto` is required), for the general
    op model of `stragglerlab import kineto` (docs/torch-workloads.md)."""

    MEGATRON = "megatron"  # workloads/engine.py: 1F1B, distributed optimizer, our tracer
    DDP = "ddp"  # torch.nn.parallel.DistributedDataParallel, dp ranks, pp = 1
    FSDP = "fsdp"  # torch.distributed.fsdp.fully_shard (FSDP2), dp ranks, pp = 1
    PIPELINING = "pipelining"  # torch.distributed.pipelining 1F1B, dp x pp ranks


TORCH_WORKLOADS = (Workload.DDP, Workload.FSDP, Workload.PIPELINING)
"""The workloads built on torch's wrappers (traced by torch.profiler alone)."""
TORCH_WORKLOAD_FAULTS = ("slow-worker",)
"""Fault kinds the torch workloads support: they act on the rank's CPU share (or device)
at step starts; the others need hook points inside our engine's own ops."""


class Placement(str, enum.Enum):
    """How a run's rank bundles go onto the nodes of a Ray cluster (a private Ray has one)."""

    PACK = "pack"
    SPREAD = "spread"


class Backend(str, enum.Enum):
    """torch.distributed backend; auto = nccl when every rank has its own GPU, else gloo."""

    AUTO = "auto"
    GLOO = "gloo"
    NCCL = "nccl"
