"""The job population of the workflow: fixed paper jobs plus a deterministic sample of jobs.

The population figures (waste CDF, M_W / M_S CDFs, long-context vs others) and
the detector scores need many jobs. `expand_population` turns the `fixed` and
`population` sections of the workflow config (config/workflow.yaml) into
concrete runs: one `(scenario name, seed)` per run and, per scenario, a fully
resolved scenario entry in the schema of config/scenarios.yaml, which the
train rule writes to `<run>/scenario.yaml` and passes as `--config`.

    fixed:                        # built-in scenarios as they are (paper jobs)
      - {scenario: clean-dp2-pp2, seeds: [0]}         # optional: steps: N
    population:
      seed: 2025                  # sampler seed: same seed, same jobs
      steps: 16                   # default run.steps of sampled jobs
      groups:
        - name: slow-worker       # job names pop-<name>-00, pop-<name>-01, ...
          kind: slow-worker       # fault kind, or `clean`
          base: clean-dp2-pp2     # built-in scenario the job starts from
          count: 4                # jobs in this group
          seeds: 1                # seeds per job (consecutive, from the job's index)
          steps: 16               # optional, else population.steps
          layouts: [dp2-pp2, dp2-pp4]        # one per job, cycled after a seeded shuffle
          first_step: [5, 8]      # inclusive range (or one int); targeted kinds only
          params: {factor: [1.3, 1.6, 2.0]}  # a list = one value per job, cycled likewise
          overrides: {run: {collective_timeout_s: 10}}  # merged over the base

`fixed` and `groups` are lists so that a `--configfile` override (snakemake
merges mappings, replaces lists) replaces the whole selection.

Sampling is seeded per group (`random.Random("<seed>:<group>")`), so adding a
group leaves the others' jobs unchanged. Victims of targeted faults are drawn
without repetition over the layout's (dp_rank, stage) cells while unused cells
remain, so jobs of one group hit different ranks and stages. Every entry is
checked with `load_scenario` (InputError naming the group and job on error).
Pure: no I/O beyond reading the built-in scenarios.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import yaml

from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.scenarios.scenario import load_scenario, scenario_to_dict
from stragglerlab.util.errors import InputError

CLEAN = "clean"
"""Group kind of jobs without a fault."""

TARGETED_KINDS = frozenset({FaultKind.SLOW_WORKER, FaultKind.NET_THROTTLE, FaultKind.NET_DELAY,
                            FaultKind.HANG, FaultKind.CRASH})
"""Kinds that act on chosen victims (the others act on the whole job)."""

FAILING_KINDS = frozenset({FaultKind.HANG, FaultKind.CRASH})
"""Kinds that end the run as failed (by design)."""

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""Scenario and group names: they become folder names under results/."""

LAYOUT_RE = re.compile(r"^dp(\d+)-pp(\d+)$")
"""A layout name, e.g. dp2-pp4."""

JOB_PREFIX = "pop-"
"""Prefix of sampled job names (pop-<group>-<index>), so they never clash with built-ins."""

_GROUP_KEYS = {"name", "kind", "base", "count", "seeds", "layouts", "first_step", "params",
               "overrides", "steps"}


@dataclass(frozen=True)
class Run:
    """One training run of the workflow: results/<scenario>/<seed>/."""

    scenario: str
    """Scenario name (folder name)."""
    seed: int
    """Run seed (`stragglerlab train --seed`)."""
    group: str
    """Population group, or `fixed` for the paper's jobs."""
    kind: str
    """Fault kinds of the scenario joined by '+', or `clean`."""

    @property
    def key(self) -> str:
        """`<scenario>/<seed>`, the run's folder below the results root."""
        return f"{self.scenario}/{self.seed}"


@dataclass(frozen=True)
class Population:
    """Every run of the workflow and the scenario entry each one trains."""

    runs: tuple[Run, ...]
    """Runs in a stable order: fixed jobs first, then groups in config order."""
    entries: dict[str, dict]
    """Scenario name -> fully resolved scenario entry (config/scenarios.yaml schema, no name)."""

    def scenario_yaml(self, scenario: str) -> str:
        """The `--config` file text for one scenario: `scenarios: {name: entry}`."""
        return yaml.safe_dump({"scenarios": {scenario: self.entries[scenario]}}, sort_keys=True)

    def to_yaml(self) -> str:
        """The whole population as one scenario config file."""
        return yaml.safe_dump({"scenarios": self.entries}, sort_keys=True)


def _merge(base: dict, over: dict) -> dict:
    """Nested merge like the scenario loader's: mappings merge, leaves are replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_layout(name: object, where: str) -> tuple[int, int]:
    """(dp, pp) of a layout name such as `dp2-pp4`."""
    m = LAYOUT_RE.match(name) if isinstance(name, str) else None
    if not m or min(int(m.group(1)), int(m.group(2))) < 1:
        raise InputError(f"{where}: layout {name!r} is not of the form dp<D>-pp<P> (D, P >= 1)")
    return int(m.group(1)), int(m.group(2))


def kind_of(entry: dict) -> str:
    """`clean` or the entry's fault kinds joined by '+'."""
    kinds = sorted({str(f.get("kind")) for f in entry.get("faults") or []})
    return "+".join(kinds) or CLEAN


def _resolve(base: str, overrides: dict, where: str) -> dict:
    """Base scenario + overrides, checked by the scenario loader; the plain dict without name."""
    try:
        scenario = load_scenario(base, overrides=overrides)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    entry = scenario_to_dict(scenario)
    entry.pop("name")
    return entry


def _check_failing(entry: dict, where: str) -> None:
    """A hang/crash must leave at least one complete traced step, or nothing can be analysed."""
    warmup = entry["run"]["warmup_steps"]
    for fault in entry.get("faults") or []:
        if fault.get("kind") in {k.value for k in FAILING_KINDS} and \
                fault.get("first_step", 0) <= warmup:
            raise InputError(f"{where}: a {fault['kind']} fault must start at first_step > "
                             f"run.warmup_steps={warmup}, so the failed run keeps a traced "
                             "step to analyse")


def _seeds(raw: object, where: str) -> list[int]:
    if not isinstance(raw, list) or not raw or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in raw):
        raise InputError(f"{where}: seeds must be a non-empty list of integers >= 0, got {raw!r}")
    if len(set(raw)) != len(raw):
        raise InputError(f"{where}: seeds {raw} repeat a seed")
    return list(raw)


MAX_GROUP_COUNT = 10_000
"""Most jobs one population group may ask for (each is a training run)."""


def _int(raw: object, where: str, lo: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < lo:
        raise InputError(f"{where} must be an integer >= {lo}, got {raw!r}")
    return raw


def expand_fixed(fixed: object, where: str = "fixed") -> tuple[list[Run], dict[str, dict]]:
    """Runs and entries of the fixed jobs: [{scenario: NAME, seeds: [..], steps: N?}]."""
    if fixed is None:
        return [], {}
    if not isinstance(fixed, list):
        raise InputError(f"{where} must be a list of {{scenario: NAME, seeds: [S, ...]}}")
    runs, entries = [], {}
    for i, spec in enumerate(fixed):
        ctx = f"{where}[{i}]"
        if not isinstance(spec, dict) or set(spec) - {"scenario", "seeds", "steps"} or \
                not {"scenario", "seeds"} <= set(spec):
            raise InputError(f"{ctx} must be {{scenario: NAME, seeds: [S, ...], steps: N "
                             f"(optional)}}, got {spec!r}")
        name = spec["scenario"]
        if not isinstance(name, str):
            raise InputError(f"{ctx}: scenario must be a scenario name, got {name!r}")
        if name in entries:
            raise InputError(f"{ctx}: scenario {name!r} is listed twice; give it several seeds")
        ctx = f"{ctx} ({name})"
        seeds = _seeds(spec["seeds"], f"{ctx}.seeds")
        over = {"run": {"steps": _int(spec["steps"], f"{ctx}.steps", 2)}} if "steps" in spec \
            else {}
        entry = _resolve(str(name), over, ctx)
        _check_failing(entry, ctx)
        entries[str(name)] = entry
        runs += [Run(str(name), s, "fixed", kind_of(entry)) for s in seeds]
    return runs, entries


def _choice_list(raw: object, where: str) -> list:
    """A scalar or a non-empty list of choices."""
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise InputError(f"{where}: an empty list has nothing to choose from")
    return values


def _cycled(rng: random.Random, values: list, count: int) -> list:
    """count values: the list shuffled once, then cycled (every value used before repeats)."""
    order = rng.sample(values, len(values))
    return [order[i % len(order)] for i in range(count)]


def _layout_overrides(base_entry: dict, dp: int, pp: int) -> dict:
    """parallel/model overrides moving a base scenario to dp x pp, keeping layers per stage."""
    per_stage = max(1, base_entry["model"]["n_layers"] // base_entry["parallel"]["pp"])
    return {"parallel": {"dp": dp, "pp": pp, "layers_per_stage": None},
            "model": {"n_layers": per_stage * pp}}


def expand_group(spec: object, pop_seed: int, default_steps: int, where: str = "group",
                 first_index: int = 0) -> tuple[list[Run], dict[str, dict]]:
    """The sampled jobs of one population group (see the module docstring)."""
    if not isinstance(spec, dict):
        raise InputError(f"{where} must be a mapping with name, kind, count, ...")
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InputError(f"{where}: name must be letters, digits, '.', '_' and '-', "
                         f"got {name!r}")
    ctx = f"{where} ({name})"
    unknown = sorted(set(spec) - _GROUP_KEYS)
    if unknown:
        raise InputError(f"{ctx}: unknown key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(_GROUP_KEYS))}")
    kind_raw = spec.get("kind", CLEAN)
    try:
        kind = None if kind_raw == CLEAN else FaultKind(kind_raw)
    except ValueError:
        allowed = ", ".join([CLEAN] + [k.value for k in FaultKind])
        raise InputError(f"{ctx}.kind: {kind_raw!r} is not one of {allowed}") from None
    count = _int(spec.get("count", 1), f"{ctx}.count", 1)
    if count > MAX_GROUP_COUNT:
        raise InputError(f"{ctx}.count must be at most {MAX_GROUP_COUNT:,} jobs, got {count:,}")
    n_seeds = _int(spec.get("seeds", 1), f"{ctx}.seeds", 1)
    steps = _int(spec.get("steps", default_steps), f"{ctx}.steps", 2)
    base = spec.get("base", "clean-dp2-pp2")
    overrides = spec.get("overrides") or {}
    params = spec.get("params") or {}
    if not isinstance(overrides, dict) or not isinstance(params, dict):
        raise InputError(f"{ctx}: overrides and params must be mappings")
    if kind is None and params:
        raise InputError(f"{ctx}: a clean group has no fault params")
    base_entry = _resolve(str(base), _merge(overrides, {"run": {"steps": steps}}),
                          f"{ctx}.base")

    rng = random.Random(f"{pop_seed}:{name}")
    layouts = _cycled(rng, _choice_list(spec.get("layouts", ["dp2-pp2"]), f"{ctx}.layouts"),
                      count)
    values = {k: _cycled(rng, _choice_list(v, f"{ctx}.params.{k}"), count)
              for k, v in sorted(params.items())}
    first_raw = spec.get("first_step", 0)
    if isinstance(first_raw, list):
        if len(first_raw) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in first_raw) or first_raw[0] > first_raw[1]:
            raise InputError(f"{ctx}.first_step: a range is [lo, hi] with lo <= hi, "
                             f"got {first_raw!r}")
        lo, hi = first_raw
    else:
        lo = hi = _int(first_raw, f"{ctx}.first_step", 0)
    used: set[tuple[int, int]] = set()
    runs, entries = [], {}
    for i in range(count):
        job = f"{JOB_PREFIX}{name}-{first_index + i:02d}"
        jctx = f"{ctx} job {job}"
        dp, pp = parse_layout(layouts[i], f"{ctx}.layouts")
        over = _merge(overrides, _layout_overrides(base_entry, dp, pp))
        over = _merge(over, {"run": {"steps": steps}, "faults": []})
        first = rng.randint(lo, hi)
        if kind is not None:
            if kind is FaultKind.STAGE_IMBALANCE and pp < 2:
                raise InputError(f"{jctx}: stage imbalance needs a layout with pp >= 2, "
                                 f"got {layouts[i]}")
            fault: dict = {"kind": kind.value, "params": {k: v[i] for k, v in values.items()}}
            if kind in TARGETED_KINDS:
                cells = [(d, s) for s in range(pp) for d in range(dp)]
                fresh = [c for c in cells if c not in used] or cells
                d, s = fresh[rng.randrange(len(fresh))]
                used.add((d, s))
                fault.update(targets=[{"dp_rank": d, "stage": s}], first_step=first)
            over["faults"] = [fault]
        entry = _resolve(str(base), over, jctx)
        entry["description"] = _describe(name, kind_of(entry), layouts[i], entry)
        _check_failing(entry, jctx)
        entries[job] = entry
        runs += [Run(job, (first_index + i) * n_seeds + k, name, kind_of(entry))
                 for k in range(n_seeds)]
    return runs, entries


def _describe(group: str, kind: str, layout: str, entry: dict) -> str:
    """One line saying what a sampled job is (shown in run.json and the report)."""
    bits = [f"population group {group}: {kind}, {layout}, {entry['run']['steps']} steps"]
    for f in entry.get("faults") or []:
        where = "".join(f" on (dp {t['dp_rank']}, stage {t['stage']})"
                        for t in f.get("targets") or [])
        params = ", ".join(f"{k}={v}" for k, v in sorted((f.get("params") or {}).items()))
        start = f" from step {f['first_step']}" if f.get("first_step") else ""
        bits.append(f"{f['kind']} {params}{where}{start}".strip())
    return "; ".join(bits)


def expand_population(fixed: object, population: object,
                      extra: tuple[list[Run], dict[str, dict]] | None = None) -> Population:
    """Every run of the workflow: the fixed jobs, each group's sampled jobs, then `extra`
    (the dev/test split cases, stragglerlab/workflow/splits.py)."""
    runs, entries = expand_fixed(fixed)
    if population is None:
        population = {}
    if not isinstance(population, dict) or set(population) - {"seed", "steps", "groups"}:
        raise InputError("population must be a mapping with seed, steps and groups")
    seed = _int(population.get("seed", 0), "population.seed", 0)
    steps = _int(population.get("steps", 16), "population.steps", 2)
    groups = population.get("groups") or []
    if not isinstance(groups, list):
        raise InputError("population.groups must be a list of groups ({name, kind, count, ...})")
    for i, spec in enumerate(groups):
        where = f"population.groups[{i}]"
        g_runs, g_entries = expand_group(spec, seed, steps, where)
        clash = sorted(set(g_entries) & set(entries))
        if clash:
            raise InputError(f"{where}: job name(s) {', '.join(clash)} already used (two "
                             "groups with one name?)")
        runs += g_runs
        entries.update(g_entries)
    if extra is not None:
        clash = sorted(set(extra[1]) & set(entries))
        if clash:
            raise InputError(f"splits: case name(s) {', '.join(clash)} already used")
        runs += extra[0]
        entries.update(extra[1])
    for name in entries:
        if not NAME_RE.match(name):
            raise InputError(f"scenario name {name!r} cannot be a folder name under results/")
    if not runs:
        raise InputError("the workflow config selects no runs: add `fixed` jobs, "
                         "`population.groups` or `splits.run`")
    return Population(tuple(runs), entries)


def coverage(pop: Population) -> dict[str, dict]:
    """Per fault kind (and `clean`): runs, distinct seeds, victim ranks and stages, layouts."""
    out: dict[str, dict] = {}
    for run in pop.runs:
        entry = pop.entries[run.scenario]
        for kind in run.kind.split("+"):
            c = out.setdefault(kind, {"runs": 0, "seeds": set(), "ranks": set(),
                                      "stages": set(), "layouts": set()})
            c["runs"] += 1
            c["seeds"].add(run.seed)
            c["layouts"].add(f"dp{entry['parallel']['dp']}-pp{entry['parallel']['pp']}")
            for f in entry.get("faults") or []:
                if f.get("kind") == kind:
                    for t in f.get("targets") or []:
                        c["ranks"].add(t["stage"] * entry["parallel"]["dp"] + t["dp_rank"])
                        c["stages"].add(t["stage"])
    return out
