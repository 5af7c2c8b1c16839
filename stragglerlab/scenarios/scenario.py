"""Scenario configs: typed dataclasses and the loader of `config/scenarios.yaml`.

The YAML has `defaults` (a full scenario) and `scenarios` (name -> overrides of
the defaults, nested by section). A user file given with `--config` is merged
on top the same way (its own `defaults` and `scenarios`). Every value is
checked on load: an unknown key, a wrong type or an impossible layout is one
InputError naming the file, the scenario and the key.

    scenario = load_scenario("clean-dp2-pp2")                     # built-in file
    scenario = load_scenario("mine", config="my.yaml", overrides={"run": {"steps": 5}})
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.resources
import re
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.scenarios.partition import Partition, balanced_partition, even_partition
from stragglerlab.scenarios.scenario_vocab import (
    TORCH_WORKLOAD_FAULTS,
    TORCH_WORKLOADS,
    Backend,
    LengthDistribution,
    PaceRate,
    Placement,
    Profiler,
    Workload,
)
from stragglerlab.util.errors import InputError
from stragglerlab.util.typed_mapping import build_dataclass

DEFAULT_CONFIG = Path(str(importlib.resources.files("stragglerlab") / "config" / "scenarios.yaml"))
"""The built-in scenarios: package data (the repository's config/scenarios.yaml)."""


@dataclass(frozen=True)
class ModelConfig:
    """The tiny GPT."""

    n_layers: int = 4
    """Transformer blocks in the whole model."""
    hidden: int = 64
    """Hidden size."""
    n_heads: int = 4
    """Attention heads."""
    vocab: int = 512
    """Vocabulary size (the logit layer on the last stage grows with it)."""
    max_seq_len: int = 256
    """Longest sequence (position embeddings)."""


@dataclass(frozen=True)
class ParallelConfig:
    """Data x pipeline layout."""

    dp: int = 2
    """Data-parallel degree."""
    pp: int = 2
    """Pipeline stages."""
    microbatches: int = 4
    """Microbatches per step (per DP rank)."""
    layers_per_stage: list[int] | None = None
    """Blocks on each stage; None: split by `partition`."""
    partition: Partition = Partition.BALANCED
    """Split when layers_per_stage is None: balanced (modelled stage costs, the logit
    layer included; stragglerlab/scenarios/partition.py) or even (equal block counts). Stage
    imbalance is a fault (stage-imbalance injector), not the default."""

    def stage_layers(self, n_layers: int) -> list[int]:
        """Blocks per stage by count alone (layers_per_stage, else even); the split a
        job uses is `Scenario.stage_partition()`, which also weighs the logit layer."""
        if self.layers_per_stage is not None:
            return list(self.layers_per_stage)
        return even_partition(n_layers, self.pp)


@dataclass(frozen=True)
class DataConfig:
    """Synthetic token data packed into fixed-size microbatches of variable-length sequences."""

    tokens_per_microbatch: int = 128
    """Packed tokens per microbatch."""
    length_distribution: LengthDistribution = LengthDistribution.FIXED
    """How sequence lengths are drawn."""
    mean_seq_len: int = 64
    """Mean sequence length, tokens."""
    longtail_sigma: float = 1.0
    """Lognormal sigma of the long-tailed lengths."""
    rebalance_across_dp: bool = False
    """Deal each step's sequences to DP ranks evenly by sum(seq_len^2) (paper §5.3)."""


@dataclass(frozen=True)
class RunConfig:
    """How the job runs."""

    steps: int = 30
    """Training steps, warm-up included."""
    warmup_steps: int = 1
    """First steps left out of the trace: start-up costs are not stragglers."""
    seed: int = 0
    """Seed of model init and data."""
    lr: float = 1e-3
    """Adam learning rate."""
    clip_norm: float = 1.0
    """Global grad-norm clip."""
    backend: Backend = Backend.AUTO
    """torch.distributed backend."""
    collective_timeout_s: float = 60.0
    """Timeout of every collective and P2P op; a hung or dead rank fails the run within it."""
    cpu_isolation: bool = True
    """Give every rank its own CPU quota (cgroup v1), so ranks behave like separate devices."""
    cores_per_rank: float | None = None
    """CPU share per rank in cores; None = 90% of the machine's cores / ranks."""
    cpu_period_us: int = 10_000
    """cgroup CFS period, microseconds."""
    pace_compute: bool = False
    """With CPU isolation: pad each compute op to its thread CPU time over the rank's
    share, undoing the CFS quota a rank carries in after a wait (workloads/pacing.py)."""
    pace_margin: float = 1.0
    """Paced ops last margin x CPU time / share (>= 1; above 1 it also absorbs scheduling noise)."""
    pace_rate: PaceRate = PaceRate.CPU
    """Our engine's pacing target: `cpu` (the op's own CPU time over the share), `warmup`
    (margin x the op's modelled work x the job's warm-up rate per unit of work for the op
    kind, times the slow-worker factor, as a device with a fixed rate) or `auto` (warmup;
    `Scenario.paced_to_warmup_rate`, workloads/pacing.py). The torch workloads always
    pace each Linear to the job's warm-up rate per FLOP."""
    planned_gc_every: int = 0
    """0: automatic Python GC; N: GC off, collect in the `gc` op every N steps."""
    trace: bool = True
    """Record the per-op trace (off only to measure tracing overhead)."""
    threads_per_rank: int = 1
    """torch intra-op threads per rank."""
    profiler: Profiler = Profiler.OFF
    """off, or kineto: torch.profiler over the traced steps, every traced op in a
    record_function(<optype>) range, per-rank traces in kineto/rank<r>.json.gz."""
    placement: Placement = Placement.PACK
    """On a Ray cluster: pack (fewest nodes, the default) or spread the ranks over nodes."""


@dataclass(frozen=True)
class Scenario:
    """One named experiment."""

    name: str
    """Scenario name."""
    description: str = ""
    """What it shows."""
    workload: Workload = Workload.MEGATRON
    """What trains: our engine (megatron) or a torch wrapper (ddp, fsdp, pipelining)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """The layout."""
    data: DataConfig = field(default_factory=DataConfig)
    """The data."""
    run: RunConfig = field(default_factory=RunConfig)
    """How it runs."""
    faults: list[dict] = field(default_factory=list)
    """Fault injections (kind + parameters), applied by injectors."""

    @property
    def world_size(self) -> int:
        """dp * pp ranks."""
        return self.parallel.dp * self.parallel.pp

    def stage_partition(self) -> list[int]:
        """Blocks per stage the job runs: layers_per_stage, else by `parallel.partition`."""
        p, m = self.parallel, self.model
        if p.layers_per_stage is not None or p.partition is Partition.EVEN:
            return p.stage_layers(m.n_layers)
        return balanced_partition(m.n_layers, p.pp, m.hidden, m.vocab,
                                  self.data.tokens_per_microbatch)

    def check(self, where: str) -> Scenario:
        """Raise InputError for an impossible layout."""
        from stragglerlab.scenarios.scenario_limits import limit_problems

        p, m, d = self.parallel, self.model, self.data
        problems = limit_problems(self)  # sizes first: the checks below may allocate by them
        if problems:
            raise InputError(f"scenario {self.name!r}: " + "; ".join(problems), where)
        if min(p.dp, p.pp, p.microbatches) < 1:
            problems.append("parallel.dp, parallel.pp and parallel.microbatches must be >= 1")
        if min(m.hidden, m.n_heads, m.vocab, m.max_seq_len) < 1:
            problems.append("model.hidden, model.n_heads, model.vocab and model.max_seq_len "
                            "must be >= 1")
        elif m.vocab < 2:
            problems.append(f"model.vocab={m.vocab} must be >= 2: with one token there is "
                            "nothing to predict (the loss is 0 at every step)")
        layers = p.stage_layers(m.n_layers) if p.pp >= 1 else None  # pp < 1: reported above
        if layers is not None and len(layers) != p.pp:
            problems.append(f"parallel.layers_per_stage has {len(layers)} entries for pp={p.pp}")
        elif layers is not None and (sum(layers) != m.n_layers or min(layers) < 0):
            problems.append(f"parallel.layers_per_stage {layers} must be >= 0 and sum to "
                            f"model.n_layers={m.n_layers}")
        elif layers is not None and 0 in layers[:-1]:
            empty = [s for s, n in enumerate(layers[:-1]) if n == 0]
            problems.append(f"pipeline stage(s) {empty} would hold no transformer block "
                            f"(blocks per stage {layers}): every stage but the last, which "
                            "holds the logit layer, needs one; set model.n_layers >= "
                            "parallel.pp or give parallel.layers_per_stage")
        if m.n_heads >= 1 and m.hidden % m.n_heads:
            problems.append(f"model.hidden={m.hidden} must be divisible by model.n_heads")
        if d.tokens_per_microbatch > m.max_seq_len * 64 or d.tokens_per_microbatch < 2:
            problems.append("data.tokens_per_microbatch must be in [2, 64 * model.max_seq_len]")
        if not 1 <= d.mean_seq_len <= m.max_seq_len:
            problems.append(f"data.mean_seq_len must be in [1, model.max_seq_len={m.max_seq_len}]")
        if self.run.steps < 1 or self.run.collective_timeout_s <= 0:
            problems.append("run.steps must be >= 1 and run.collective_timeout_s > 0")
        if not 0 <= self.run.warmup_steps < self.run.steps:
            problems.append(f"run.warmup_steps={self.run.warmup_steps} must be in [0, run.steps="
                            f"{self.run.steps}): at least one step is traced after the warm-up "
                            f"(with `train --steps`, give at least {self.run.warmup_steps + 1})")
        if self.run.cores_per_rank is not None and self.run.cores_per_rank <= 0:
            problems.append("run.cores_per_rank must be > 0")
        if self.run.threads_per_rank < 1 or self.run.planned_gc_every < 0:
            problems.append("run.threads_per_rank must be >= 1 and run.planned_gc_every >= 0")
        if not 1000 <= self.run.cpu_period_us <= 1_000_000:
            problems.append("run.cpu_period_us must be in [1000, 1000000] (cgroup CFS limits)")
        if not 1.0 <= self.run.pace_margin <= 10.0:
            problems.append("run.pace_margin must be in [1, 10] (1: pace to the share itself)")
        problems += self._workload_problems()
        if problems:
            raise InputError(f"scenario {self.name!r}: " + "; ".join(problems), where)
        from stragglerlab.scenarios.faults import parse_faults

        parse_faults(self.faults, p.dp, p.pp, self.run.steps, f"{where} (scenario {self.name!r})")
        return self


    @property
    def varlen(self) -> bool:
        """Whether microbatches differ in work: varlen data or a seq-imbalance fault."""
        return self.data.length_distribution is not LengthDistribution.FIXED or any(
            isinstance(f, dict) and f.get("kind") == "seq-imbalance" for f in self.faults)

    @property
    def paced_to_warmup_rate(self) -> bool:
        """Whether our engine paces compute ops to the warm-up rate (`run.pace_rate`
        warmup, or auto on fixed-length data), rather than to their own CPU time. Never for
        a torch workload: its own pacer (workloads/torch_pacing.py) knows no device factor,
        so a slow worker there must act through the CPU quota."""
        if self.workload in TORCH_WORKLOADS:
            return False
        return self.run.pace_rate in (PaceRate.WARMUP, PaceRate.AUTO)

    def _workload_problems(self) -> list[str]:
        """What a torch workload cannot run (empty for the megatron engine)."""
        if self.workload not in TORCH_WORKLOADS:
            return []
        p, w = self.parallel, self.workload.value
        problems = []
        if self.run.profiler is not Profiler.KINETO:
            problems.append(f"workload {w} is traced by torch.profiler alone: set "
                            "run.profiler: kineto")
        if self.workload in (Workload.DDP, Workload.FSDP) and p.pp != 1:
            problems.append(f"workload {w} is data-parallel only: set parallel.pp: 1")
        if self.workload is Workload.PIPELINING and (p.pp < 2 or self.model.n_layers < p.pp):
            problems.append("workload pipelining needs parallel.pp >= 2 and model.n_layers "
                            ">= parallel.pp (one block or more per stage)")
        kinds = sorted({str(f.get("kind")) for f in self.faults if isinstance(f, dict)}
                       - set(TORCH_WORKLOAD_FAULTS))
        if kinds:
            problems.append(f"workload {w} supports the faults {', '.join(TORCH_WORKLOAD_FAULTS)}"
                            f", not {', '.join(kinds)[:80]}")
        return problems


def _merge(base: dict, over: dict) -> dict:
    """Nested dict merge: sections merge key by key, leaves are replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


SCENARIO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
"""What a scenario name may be: it names a results folder, so no '/', '..' or blanks."""


def _read_yaml(path: Path) -> dict:
    from stragglerlab.util.filecheck import load_yaml

    fix = "fix the scenario config (see config/scenarios.yaml)"
    raw = load_yaml(path, "scenario config", fix, empty_ok=True) or {}  # empty: no overrides
    if not isinstance(raw, dict) or set(raw) - {"defaults", "scenarios"}:
        raise InputError("a scenario config holds only 'defaults' and 'scenarios' mappings",
                         str(path))
    for key in ("defaults", "scenarios"):
        if not isinstance(raw.get(key) or {}, dict):
            raise InputError(f"'{key}' must be a mapping", str(path))
    for name, over in (raw.get("scenarios") or {}).items():
        if not isinstance(name, str) or not SCENARIO_NAME.fullmatch(name):
            # A name becomes a folder (results/<name>/<seed>) and a line of listings.
            quote = f" (YAML read {name} as a number: quote it)" if not isinstance(
                name, str) else ""
            raise InputError(f"scenario name {str(name)[:40]!r} is not a name{quote}: use "
                             "letters, digits, '.', '_' and '-', starting with a letter or "
                             "digit, at most 80 characters; " + fix, str(path))
        if not isinstance(over or {}, dict):
            raise InputError(f"scenarios.{name} must be a mapping of sections "
                             "(model, parallel, data, run, faults); " + fix, str(path))
    return raw


def scenario_table(config: str | Path | None = None) -> tuple[dict, dict[str, dict], str]:
    """(defaults, {name: overrides}, where) of the built-in file merged with config."""
    raw = _read_yaml(DEFAULT_CONFIG)
    defaults, scenarios = raw.get("defaults") or {}, dict(raw.get("scenarios") or {})
    where = str(DEFAULT_CONFIG)
    if config is not None:
        user = _read_yaml(Path(config))
        defaults = _merge(defaults, user.get("defaults") or {})
        for name, over in (user.get("scenarios") or {}).items():
            scenarios[name] = _merge(scenarios.get(name) or {}, over or {})
        where = str(config)
    return defaults, scenarios, where


def load_scenario(
    name: str, config: str | Path | None = None, overrides: dict | None = None
) -> Scenario:
    """The named scenario: defaults, then its overrides, then `overrides`; checked."""
    defaults, scenarios, where = scenario_table(config)
    if name not in scenarios:
        raise InputError(f"unknown scenario {name!r}; known: {', '.join(sorted(scenarios))}",
                         where)
    merged = _merge(_merge(defaults, scenarios[name] or {}), overrides or {})
    merged["name"] = name
    from stragglerlab.scenarios.implied_faults import with_implied_faults

    # Imbalance phrased outside `faults` is a fault all the same (ground truth says so).
    try:
        scenario = build_dataclass(Scenario, merged, where, f"scenario {name!r}").check(where)
    except InputError:
        _check_defaults(defaults, where)  # a bad `defaults` is named as such
        raise
    return with_implied_faults(scenario).check(where)


def _check_defaults(defaults: dict, where: str) -> None:
    """InputError naming `defaults` when the defaults alone are no valid scenario: every
    scenario inherits them, so blaming the first scenario checked would mislead."""
    build_dataclass(Scenario, {**defaults, "name": "defaults"}, where,
                    "the config's 'defaults'").check(f"{where} ('defaults')")


def list_scenarios(config: str | Path | None = None) -> list[Scenario]:
    """Every scenario, each checked (so one bad entry is reported even if unused)."""
    defaults, scenarios, where = scenario_table(config)
    _check_defaults(defaults, where)
    return [load_scenario(n, config) for n in sorted(scenarios)]


def scenario_to_dict(scenario: Scenario) -> dict:
    """Plain JSON-able dict (enums as values), e.g. for run.json."""

    def plain(v):
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return plain(dataclasses.asdict(scenario))
