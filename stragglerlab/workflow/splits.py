"""The detector benchmark's two case splits, `dev` and `test`: seeded, disjoint, covering.

`dev` is where detector thresholds are tuned; `test` is scored only at the
end and its score is the headline. Both are drawn by one
generator from the same case space with different seeds, so they follow one
distribution but share no case (a case is its layout plus its fault list;
`expand_splits` refuses a signature that appears in both). Every case is an
ordinary scenario entry in the documented format (config/scenarios.yaml),
checked by `load_scenario`, so nothing here changes what a scenario can be.

The case space, per split:

* layouts `dp{1,2,4} x pp{1,2,4}` without dp1-pp1, in three families:
  pure DP (pp 1), pure PP (dp 1) and DP+PP (`LayoutFamily`);
* a clean control in every layout;
* every fault kind once in every layout family it can occur in (stage
  imbalance needs pp >= 2), victims drawn over every (dp_rank, stage) cell:
  first, inner or last stage, any DP rank;
* multi-fault cases: two slow workers, a slow worker plus GC, a throttle
  plus stage imbalance, a slow worker plus a delayed link, a straggler that
  moves (one victim, then another), and three faults at once;
* step windows: targeted faults start after CLEAN_STEPS_BEFORE clean traced steps and
  a share of them stop (last_step) before the run ends;
* magnitudes from barely straggling to severe (`SEVERITY`), drawn
  continuously so no dev value repeats in test;
* the rest of `count` filled with random single or multi-fault cases.

Config (config/workflow.yaml, key `splits`; `run` selects what the workflow
trains: the default suite runs none, `--configfile config/test.yaml` runs
`test` into results/test):

    splits:
      seed: 14            # dev draws from "<seed>:dev", test from "<seed>:test"
      steps: 16           # run.steps of every case
      pace_compute: false # run.pace_compute of every case (workloads/pacing.py)
      run: []             # splits the workflow trains and scores
      dev: {count: 44}
      test: {count: 44}

    pop = expand_splits(config["splits"])     # -> (runs, entries) of the selected splits
    .venv/bin/python -m stragglerlab.workflow.split_coverage   # both splits' coverage and time
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.trace.meta import LayoutFamily
from stragglerlab.util.errors import InputError
from stragglerlab.workflow.population import (
    FAILING_KINDS,
    TARGETED_KINDS,
    Run,
    _layout_overrides,
    _resolve,
    kind_of,
)


class Split(str, enum.Enum):
    """The two case splits."""

    DEV = "dev"
    TEST = "test"


LAYOUTS: tuple[tuple[int, int], ...] = ((2, 1), (4, 1), (1, 2), (1, 4), (2, 2), (2, 4),
                                        (4, 2), (4, 4))
"""(dp, pp) of every layout a case can have."""

CLEAN_STEPS_BEFORE: tuple[int, int] = (3, 6)
"""Inclusive range of the clean traced steps before a targeted fault's first step: at
least `fault_control.MIN_BASELINE_STEPS` (3), so its slowdown is measured within the run.
The first step is the cases' warm-up steps (not traced) plus this, so the clean steps
before a fault do not depend on how many warm-up steps a run has (a first step drawn
outright would leave most faults without 3 clean traced steps before them)."""

MIN_STEPS_AFTER_START = 6
"""Steps `splits.steps` leaves after the latest first step: a window of >= 3 steps that
stops, and >= 3 clean steps after it, fit."""

STOP_SHARE = 0.3
"""Share of targeted, non-failing faults that stop before the run ends (a last_step)."""

SEVERITY: dict[FaultKind, dict[str, tuple[tuple[float, float], ...]]] = {
    FaultKind.SLOW_WORKER: {"factor": ((1.12, 1.25), (1.3, 1.7), (1.8, 3.0))},
    FaultKind.NET_THROTTLE: {"rate_mbit": ((100.0, 160.0), (40.0, 80.0), (15.0, 30.0))},
    FaultKind.NET_DELAY: {"delay_ms": ((3.0, 6.0), (8.0, 15.0), (20.0, 40.0))},
    FaultKind.GC_PAUSES: {"pause_ms": ((40.0, 70.0), (80.0, 150.0), (180.0, 300.0))},
    FaultKind.STAGE_IMBALANCE: {"vocab": ((1536.0, 2560.0), (3072.0, 5120.0),
                                          (6144.0, 8192.0))},
    FaultKind.SEQ_IMBALANCE: {"longtail_sigma": ((0.8, 1.0), (1.1, 1.3), (1.4, 1.6))},
}
"""Per kind, the magnitude parameter's (lo, hi) at the severity levels barely / mild /
severe (barely: job S about 1.05, from the §6 table's factor 1.4 -> S 1.12 and the
fault benchmark, benchmarks/README.md)."""

INTEGER_PARAMS = frozenset({"vocab"})
"""Magnitudes that must be integers."""

COMBOS: tuple[tuple[FaultKind, ...], ...] = (
    (FaultKind.SLOW_WORKER, FaultKind.SLOW_WORKER),
    (FaultKind.SLOW_WORKER, FaultKind.GC_PAUSES),
    (FaultKind.NET_THROTTLE, FaultKind.STAGE_IMBALANCE),
    (FaultKind.SLOW_WORKER, FaultKind.NET_DELAY),
    (FaultKind.SLOW_WORKER, FaultKind.SLOW_WORKER, FaultKind.GC_PAUSES),
)
"""Fault mixes of the multi-fault cases (each split has each at least once)."""

FAILING_TIMEOUT_S = 10.0
"""collective_timeout_s of cases with a hang or crash (the run fails within it), per 4
ranks (`failing_timeout_s`)."""


def failing_timeout_s(world_size: int) -> float:
    """collective_timeout_s of a hang or crash case: FAILING_TIMEOUT_S per 4 ranks, at
    least FAILING_TIMEOUT_S. A recv waits out up to a whole step, and the cold first step
    grows with the ranks sharing the host's cores: DP 4 x PP 4 (16 ranks on 2 cores) took
    11-16 s here, so 10 s fails its stage 0 in the first step, before the fault; 40 s
    covers it with a margin."""
    return FAILING_TIMEOUT_S * max(1.0, world_size / 4)

SEED_OFFSET = {Split.DEV: 0, Split.TEST: 1000}
"""First run seed of each split's cases."""

_KEYS = {"seed", "steps", "pace_compute", "run", "dev", "test"}


@dataclass(frozen=True, kw_only=True)
class Case:
    """One case of a split: a scenario entry and what it covers."""

    name: str
    """Scenario name, `<split>-NN`."""
    split: Split
    """The split it belongs to."""
    dp: int
    """DP degree."""
    pp: int
    """PP degree."""
    entry: dict
    """Resolved scenario entry (config/scenarios.yaml schema, no name)."""
    seed: int
    """Run seed (`train --seed`): dev from 0, test from SEED_OFFSET[test], so even the clean
    controls of one layout differ between the splits (data order, initial weights)."""

    @property
    def family(self) -> LayoutFamily:
        """Layout family."""
        return LayoutFamily.of(self.dp, self.pp)

    @property
    def kinds(self) -> list[str]:
        """Fault kinds of the case (`clean` for none)."""
        return sorted({f["kind"] for f in self.entry.get("faults") or []}) or ["clean"]

    def signature(self) -> str:
        """Identity of a case: its layout and fault list (what disjointness compares)."""
        faults = sorted(repr(sorted(f.items())) for f in self.entry.get("faults") or [])
        return f"dp{self.dp}-pp{self.pp}|seed{self.seed}|" + "|".join(faults)


def _magnitude(rng: random.Random, kind: FaultKind, level: int) -> dict:
    out = {}
    for key, levels in SEVERITY.get(kind, {}).items():
        lo, hi = levels[level]
        value = rng.uniform(lo, hi)
        out[key] = int(round(value / 64) * 64) if key in INTEGER_PARAMS else round(value, 2)
    if kind is FaultKind.GC_PAUSES:
        out["every_steps"] = rng.randint(2, 4)
    if kind is FaultKind.SEQ_IMBALANCE:
        out["mean_seq_len"] = 128
    return out


def _fault(rng: random.Random, kind: FaultKind, dp: int, pp: int, steps: int,
           taken: set[tuple[int, int]], warmup: int) -> dict:
    """One fault record of the scenario format; targeted victims avoid `taken` cells;
    `warmup`: the cases' warm-up steps (the first traced step)."""
    fault: dict = {"kind": kind.value, "params": _magnitude(rng, kind, rng.randrange(3))}
    targeted = kind in TARGETED_KINDS or (kind is FaultKind.GC_PAUSES and rng.random() < 0.5)
    if targeted:
        cells = [(d, s) for s in range(pp) for d in range(dp) if (d, s) not in taken] or \
            [(d, s) for s in range(pp) for d in range(dp)]
        d, s = cells[rng.randrange(len(cells))]
        taken.add((d, s))
        first = warmup + rng.randint(*CLEAN_STEPS_BEFORE)
        fault.update(targets=[{"dp_rank": d, "stage": s}], first_step=first)
        if kind not in FAILING_KINDS and rng.random() < STOP_SHARE:
            fault["last_step"] = rng.randint(first + 3, steps - 3)
    return fault


def _moving(rng: random.Random, dp: int, pp: int, steps: int, warmup: int) -> list[dict]:
    """A slow worker that moves: one victim for a window, then another until the end."""
    taken: set[tuple[int, int]] = set()
    a = _fault(rng, FaultKind.SLOW_WORKER, dp, pp, steps, taken, warmup)
    b = _fault(rng, FaultKind.SLOW_WORKER, dp, pp, steps, taken, warmup)
    a["first_step"] = warmup + rng.randint(*CLEAN_STEPS_BEFORE)
    a["last_step"] = a["first_step"] + 3
    b["first_step"] = a["last_step"] + 1
    b.pop("last_step", None)
    return [a, b]


def _layout_for(rng: random.Random, kinds: tuple[FaultKind, ...],
                family: LayoutFamily | None = None,
                layouts: tuple[tuple[int, int], ...] = LAYOUTS) -> tuple[int, int]:
    need_pp = FaultKind.STAGE_IMBALANCE in kinds
    need_two = sum(k in TARGETED_KINDS for k in kinds) >= 2
    choices = [(d, p) for d, p in layouts
               if (family is None or LayoutFamily.of(d, p) is family)
               and (not need_pp or p >= 2) and (not need_two or d * p >= 2)]
    return choices[rng.randrange(len(choices))]


def _plan(rng: random.Random, count: int,
          layouts: tuple[tuple[int, int], ...] = LAYOUTS,
          ) -> list[tuple[tuple[FaultKind, ...], tuple[int, int], bool]]:
    """(kinds, layout, moving) of every case: coverage first, then random fill."""
    plan: list = [((), layout, False) for layout in layouts]
    for kind in FaultKind:
        for family in LayoutFamily:
            if kind is FaultKind.STAGE_IMBALANCE and family is LayoutFamily.PURE_DP:
                continue
            plan.append(((kind,), _layout_for(rng, (kind,), family, layouts=layouts), False))
    for combo in COMBOS:
        plan.append((combo, _layout_for(rng, combo, layouts=layouts), False))
    plan.append(((FaultKind.SLOW_WORKER,), _layout_for(rng, (FaultKind.SLOW_WORKER,) * 2,
                                                  layouts=layouts), True))
    if count < len(plan):
        raise InputError(f"splits: count {count} is below the {len(plan)} cases the coverage "
                         "plan needs (a clean control per layout, every kind per layout "
                         "family, every fault mix)")
    singles = [k for k in FaultKind if k not in FAILING_KINDS]
    while len(plan) < count:
        kinds = rng.choice(COMBOS) if rng.random() < 0.35 else (rng.choice(singles),)
        plan.append((kinds, _layout_for(rng, kinds, layouts=layouts), False))
    return plan


def generate_split(split: Split, seed: int, steps: int, count: int,
                   layouts: tuple[tuple[int, int], ...] = LAYOUTS,
                   pace_compute: bool = False) -> list[Case]:
    """The cases of one split (deterministic in seed, split and count). `layouts`: the
    (dp, pp) a case can have; other ones than LAYOUTS draw extra dev material (e.g.
    config/dev-layout-scenarios.yaml), never a split the workflow runs. `pace_compute`:
    every case's run.pace_compute (compute ops at the rank's nominal rate, whatever CFS
    quota it carried in from a wait: workloads/pacing.py); it changes no draw."""
    rng = random.Random(f"{seed}:{split.value}")
    warmup = int(_resolve("clean-dp2-pp2", {"run": {"steps": steps}, "faults": []},
                          f"splits.{split.value}")["run"]["warmup_steps"])
    need = warmup + CLEAN_STEPS_BEFORE[1] + MIN_STEPS_AFTER_START
    if steps < need:
        raise InputError(f"splits.steps is {steps}; with {warmup} warm-up steps the cases "
                         f"need at least {need} (a fault's {CLEAN_STEPS_BEFORE[1]} clean "
                         f"steps before it at most, and {MIN_STEPS_AFTER_START} after its "
                         "latest start): raise splits.steps")
    cases = []
    for i, (kinds, (dp, pp), moving) in enumerate(_plan(rng, count, layouts)):
        name = f"{split.value}-{i:02d}"
        taken: set[tuple[int, int]] = set()
        faults = _moving(rng, dp, pp, steps, warmup) if moving else \
            [_fault(rng, k, dp, pp, steps, taken, warmup) for k in kinds]
        seq = FaultKind.SEQ_IMBALANCE in kinds
        base = "seq-imbalance" if seq else "clean-dp2-pp2"
        run: dict = {"steps": steps, "pace_compute": pace_compute}
        if any(FaultKind(f["kind"]) in FAILING_KINDS for f in faults):
            run["collective_timeout_s"] = failing_timeout_s(dp * pp)
        over = {"run": run, "faults": []}
        base_entry = _resolve(base, {"run": {"steps": steps}, "faults": []}, name)
        over.update(_layout_overrides(base_entry, dp, pp))
        over["faults"] = faults
        entry = _resolve(base, over, f"splits.{split.value} case {name}")
        entry["description"] = (f"{split.value} case: {kind_of(entry)}, dp{dp}-pp{pp}"
                                + ("; a moving slow worker" if moving else ""))
        cases.append(Case(name=name, split=split, dp=dp, pp=pp, entry=entry,
                          seed=SEED_OFFSET[split] + i))
    return cases


def _int(raw: object, where: str, lo: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < lo:
        raise InputError(f"{where} must be an integer >= {lo}, got {raw!r}")
    return raw


@dataclass(frozen=True, kw_only=True)
class SplitsConfig:
    """The workflow config's `splits` mapping, checked."""

    seed: int = 14
    """dev draws from "<seed>:dev", test from "<seed>:test"."""
    steps: int = 16
    """run.steps of every case: at least warm-up + 6 + `MIN_STEPS_AFTER_START` (15 with
    the defaults' three warm-up steps), so a fault's window and the clean steps around
    it fit."""
    pace_compute: bool = True
    """run.pace_compute of every case (workloads/pacing.py), with the scenario defaults'
    `pace_rate: auto`: compute ops at the job's warm-up rate per unit of their modelled
    work, as on a device, varlen data included. Pacing changes no draw, only how the
    cases run. (Not CPU-time pacing: that keeps the vCPU's own noise in every op.)"""
    counts: dict[Split, int]
    """Cases per split."""
    run: tuple[Split, ...] = ()
    """The splits the workflow trains and scores."""


def parse_splits(raw: object) -> SplitsConfig:
    """The config's `splits` mapping, checked (None: the defaults, no split run)."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict) or set(raw) - _KEYS:
        raise InputError("splits must be a mapping with seed, steps, pace_compute, run, dev "
                         f"and test, got {raw!r}")
    seed = _int(raw.get("seed", 14), "splits.seed", 0)
    steps = _int(raw.get("steps", 16), "splits.steps", 12)
    pace = raw.get("pace_compute", True)
    if not isinstance(pace, bool):
        raise InputError(f"splits.pace_compute must be true or false, got {pace!r}")
    counts = {}
    for split in Split:
        spec = raw.get(split.value) or {}
        if not isinstance(spec, dict) or set(spec) - {"count"}:
            raise InputError(f"splits.{split.value} must be {{count: N}}, got {spec!r}")
        counts[split] = _int(spec.get("count", 44), f"splits.{split.value}.count", 1)
    selected = raw.get("run") or []
    if not isinstance(selected, list) or not all(s in {x.value for x in Split}
                                                 for s in selected):
        raise InputError(f"splits.run must be a list of dev and/or test, got {selected!r}")
    return SplitsConfig(seed=seed, steps=steps, pace_compute=pace, counts=counts,
                        run=tuple(Split(s) for s in dict.fromkeys(selected)))


def all_cases(raw: object) -> dict[Split, list[Case]]:
    """Both splits' cases, checked disjoint (no case signature in both)."""
    return _all_cases(parse_splits(raw))


def _all_cases(cfg: SplitsConfig) -> dict[Split, list[Case]]:
    cases = {s: generate_split(s, cfg.seed, cfg.steps, cfg.counts[s],
                               pace_compute=cfg.pace_compute) for s in Split}
    dev = {c.signature() for c in cases[Split.DEV]}
    shared = dev & {c.signature() for c in cases[Split.TEST]}
    if shared:
        raise InputError(f"splits: dev and test share {len(shared)} case(s); change splits.seed")
    return cases


def expand_splits(raw: object) -> tuple[list[Run], dict[str, dict]]:
    """Runs and scenario entries of the splits the config selects (`splits.run`)."""
    cfg = parse_splits(raw)
    if not cfg.run:
        return [], {}
    cases = _all_cases(cfg)
    runs, entries = [], {}
    for split in cfg.run:
        for case in cases[split]:
            entries[case.name] = case.entry
            runs.append(Run(case.name, case.seed, f"split-{split.value}", kind_of(case.entry)))
    return runs, entries
