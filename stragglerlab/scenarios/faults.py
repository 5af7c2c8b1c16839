"""Fault contracts: what a scenario asks to inject (FaultSpec) and the ground truth (FaultRecord).

A scenario lists faults as mappings:

    faults:
      - kind: slow-worker
        targets: [{dp_rank: 0, stage: 1}]
        first_step: 5          # inclusive
        last_step: null        # inclusive; null = to the end
        params: {factor: 2.0}

Each run writes `faults.json`: a list of FaultRecord dicts (design.md §3):
kind, targets [{rank, dp_rank, stage}], first_step, last_step, requested and
measured magnitudes with units in the keys. A clean run writes [].

    specs = parse_faults(scenario.faults, dp=2, pp=2, steps=31, where="scenarios.yaml")
    records = read_faults("results/x/0/faults.json", meta)   # validated FaultRecords
    write_faults("results/x/0/faults.json", records)
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import Checker, echo, finite_or_none, load_json

FAULTS_FIX = ("rewrite it as a JSON list of fault records (see docs/faults.md#ground-truth) "
              "or rerun the training")
"""The fix a bad faults.json message suggests."""


class FaultKind(str, enum.Enum):
    """The fault kinds the testbed injects (design.md §5)."""

    SLOW_WORKER = "slow-worker"
    NET_THROTTLE = "net-throttle"
    NET_DELAY = "net-delay"
    GC_PAUSES = "gc-pauses"
    STAGE_IMBALANCE = "stage-imbalance"
    SEQ_IMBALANCE = "seq-imbalance"
    HANG = "hang"
    CRASH = "crash"


TARGETED_KINDS = frozenset({FaultKind.SLOW_WORKER.value, FaultKind.NET_THROTTLE.value,
                            FaultKind.NET_DELAY.value, FaultKind.HANG.value,
                            FaultKind.CRASH.value})
"""Kinds that act on named workers (their injectors' `needs_targets`): a record of one
with no target names no victim. The others act job-wide unless targets narrow them."""


@dataclass(frozen=True, order=True)
class Target:
    """One victim worker."""

    rank: int
    """Global rank (stage * dp + dp_rank)."""
    dp_rank: int
    """Data-parallel rank."""
    stage: int
    """Pipeline stage."""

    def to_dict(self) -> dict:
        """JSON form."""
        return {"rank": self.rank, "dp_rank": self.dp_rank, "stage": self.stage}

    @classmethod
    def from_dict(cls, raw: object, chk: Checker, where: str,
                  meta: JobMeta | None = None) -> Target:
        """Validate {rank, dp_rank, stage}; with meta, inside the job's DP x PP layout."""
        raw = chk.mapping(raw, where)
        dp = meta.dp_size if meta else None
        pp = meta.pp_size if meta else None
        dp_rank = chk.integer(raw.get("dp_rank"), f"{where}.dp_rank", 0,
                              None if dp is None else dp - 1)
        stage = chk.integer(raw.get("stage"), f"{where}.stage", 0, None if pp is None else pp - 1)
        rank = chk.integer(raw.get("rank"), f"{where}.rank", 0,
                           None if dp is None else dp * pp - 1)
        if dp is not None and rank != stage * dp + dp_rank:
            chk.fail(f"{where}.rank", f"{rank} is not stage * dp_size + dp_rank = "
                                      f"{stage} * {dp} + {dp_rank}")
        return cls(rank, dp_rank, stage)


@dataclass(frozen=True)
class FaultSpec:
    """One requested fault."""

    kind: FaultKind
    """What to inject."""
    targets: tuple[Target, ...]
    """Victims; empty for job-wide faults (e.g. stage or sequence imbalance)."""
    first_step: int = 0
    """First affected step (inclusive)."""
    last_step: int | None = None
    """Last affected step (inclusive); None = to the end."""
    params: dict = field(default_factory=dict)
    """Magnitudes, units in the keys (factor, rate_mbit, delay_ms, pause_ms, ...)."""

    def active(self, step: int) -> bool:
        """True when step lies in the fault's window."""
        return step >= self.first_step and (self.last_step is None or step <= self.last_step)

    def targets_rank(self, rank: int) -> bool:
        """True when rank is a victim."""
        return any(t.rank == rank for t in self.targets)


@dataclass
class FaultRecord:
    """Ground truth of one injected fault, as written to faults.json."""

    kind: str
    """FaultKind value."""
    targets: list[dict]
    """[{rank, dp_rank, stage}]."""
    first_step: int
    """First affected step."""
    last_step: int | None
    """Last affected step, None = to the end."""
    requested: dict
    """Requested magnitudes."""
    measured: dict
    """Measured magnitudes (same units), empty when nothing could be measured."""

    @property
    def took_effect(self) -> bool:
        """False when its own measurement shows it never acted, so no detector could see
        it: GC pauses whose window held no full collection (`measured.pauses` 0; automatic
        GC fires every few steps, a short window can fall between two collections)."""
        kind = str(getattr(self.kind, "value", self.kind))
        return not (kind == FaultKind.GC_PAUSES.value and self.measured.get("pauses") == 0)

    def to_json(self) -> dict:
        """JSON form; non-finite magnitudes are written as null (unknown)."""
        return {"kind": str(getattr(self.kind, "value", self.kind)),
                "targets": [dict(t) for t in self.targets],
                "first_step": self.first_step, "last_step": self.last_step,
                "requested": finite_or_none(self.requested),
                "measured": finite_or_none(self.measured)}

    to_dict = to_json

    @classmethod
    def from_json(cls, raw: object, chk: Checker, where: str,
                  meta: JobMeta | None = None) -> FaultRecord:
        """Validate one record: known kind, targets in the layout, a step window, magnitudes."""
        raw = chk.mapping(raw, where)
        kind = chk.string(raw.get("kind"), f"{where}.kind")
        if kind not in FaultKind._value2member_map_:
            chk.fail(f"{where}.kind", f"{echo(kind)} is not one of "
                                      f"{', '.join(k.value for k in FaultKind)}")
        targets = raw.get("targets")
        targets = chk.listing([] if targets is None else targets, f"{where}.targets")
        parsed = [Target.from_dict(t, chk, f"{where}.targets[{i}]", meta).to_dict()
                  for i, t in enumerate(targets)]
        if kind in TARGETED_KINDS and not parsed:
            chk.fail(f"{where}.targets", f"empty: a {kind} fault acts on named workers, so "
                     "its record names at least one ({rank, dp_rank, stage})")
        first = chk.integer(raw.get("first_step", 0), f"{where}.first_step", minimum=0,
                            maximum=MAX_STEP)
        last = chk.integer(raw.get("last_step"), f"{where}.last_step", optional=True,
                           maximum=MAX_STEP)
        if last is not None and last < first:
            chk.fail(f"{where}.last_step", f"{last} < first_step {first} (null = to the end)")
        magnitudes = {}
        for key in ("requested", "measured"):
            value = raw.get(key)
            value = {} if value is None else value
            chk.mapping(value, f"{where}.{key}")
            chk.finite_tree(value, f"{where}.{key}")
            for name, v in value.items():
                if _is_magnitude(str(name)) and v is not None:
                    chk.number(v, f"{where}.{key}.{name}")
                    problem = _sign_problem(str(name), v, key == "measured")
                    if problem:
                        chk.fail(f"{where}.{key}.{name}", problem)
            magnitudes[key] = value
        return cls(kind, parsed, first, last, magnitudes["requested"], magnitudes["measured"])


MAX_STEP = 2**53
"""Largest step number a fault window may name (exact in float64)."""
MAX_FAULTS = 1_000
"""Most fault records one faults.json may hold (a testbed run injects a handful)."""
_UNITS = ("_ms", "_s", "_us", "_mbit", "_kb", "_mb", "_bytes")


_POSITIVE = frozenset({"factor", "slowdown", "rate_mbit", "pause_ms", "burst_kb"})
"""Magnitudes that mean nothing at 0 or below: a ratio (a worker 0 times as fast), a link
rate (0 passes nothing: a hang, not a throttle), a pause or a bucket size."""
_SIGNED_MEASURED = frozenset({"delay_ms", "arrival_ms"})
"""Measured magnitudes that are differences (net-delay: the victims' median latency or
arrival over the others'), so a small delay can measure slightly below 0 in noise. The
requested delay_ms is never negative."""


def _is_magnitude(key: str) -> bool:
    """A requested/measured key that must hold a number: factor, slowdown or a unit suffix."""
    return key in ("factor", "slowdown") or key.endswith(_UNITS)


def _sign_problem(key: str, value: float, measured: bool) -> str | None:
    """Why a magnitude's sign is impossible, else None: every magnitude is >= 0 (a duration,
    a size, a rate), those in _POSITIVE > 0; measured differences may be negative."""
    if key in _POSITIVE and value <= 0:
        return f"{value} must be > 0 (a {key} of 0 or below means nothing)"
    if value < 0 and not (measured and key in _SIGNED_MEASURED):
        return f"{value} must be >= 0 (a negative {key} means nothing)"
    return None


def read_faults(path: str | Path, meta: JobMeta | None = None) -> list[FaultRecord]:
    """faults.json: the validated ground truth ([] for a clean run); ranks checked against meta."""
    chk = Checker(path, FAULTS_FIX)
    raw = chk.listing(load_json(path, "ground truth (faults.json)", FAULTS_FIX,
                                regular_only=True), "faults.json")
    if len(raw) > MAX_FAULTS:
        chk.fail("faults.json", f"{len(raw):,} fault records, over the {MAX_FAULTS:,} one run "
                 "can carry (every record is scored against every finding)")
    records = [FaultRecord.from_json(r, chk, f"faults[{i}]", meta) for i, r in enumerate(raw)]
    seen: dict[str, int] = {}
    for i, rec in enumerate(records):
        same = seen.setdefault(json.dumps(rec.to_json(), sort_keys=True), i)
        if same != i:
            chk.fail(f"faults[{i}]", f"the same record as faults[{same}] (kind, targets, steps, "
                     "requested and measured all equal): one fault is one record, and a copy "
                     "would be scored twice (remove the copy)")
    return records


def write_faults(path: str | Path, records: list[FaultRecord | dict]) -> None:
    """Write faults.json (atomically): a JSON list, as design.md §3 fixes it.

    The file stays a bare list for compatibility; the run folder's layout
    version is run.json's `schema`.
    """
    out = [r.to_json() if isinstance(r, FaultRecord) else
           FaultRecord.from_json(finite_or_none(r), Checker(path, "fix the caller"), "record")
           .to_json() for r in records]
    atomic_write_json(path, out)


_SPEC_KEYS = {"kind", "targets", "first_step", "last_step", "params"}


def _is_int(value: object) -> bool:
    """An integer, not a bool (YAML's true/false are not step or rank numbers)."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_faults(raw: list, dp: int, pp: int, steps: int, where: str) -> list[FaultSpec]:
    """Validate the scenario's fault list; one InputError names the entry and the problem."""
    specs = []
    for i, entry in enumerate(raw):
        ctx = f"faults[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{ctx} must be a mapping with kind, targets, ...", where)
        unknown = sorted(set(entry) - _SPEC_KEYS)
        if unknown:
            raise InputError(f"{ctx}: unknown key(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(_SPEC_KEYS))}", where)
        try:
            kind = FaultKind(entry.get("kind"))
        except ValueError:
            allowed = ", ".join(k.value for k in FaultKind)
            raise InputError(f"{ctx}: kind {entry.get('kind')!r} is not one of {allowed}",
                             where) from None
        raw_targets = entry.get("targets")
        if raw_targets is not None and not isinstance(raw_targets, list):
            raise InputError(f"{ctx}: targets must be a list of {{dp_rank: D, stage: S}}, "
                             f"got {raw_targets!r}", where)
        targets = []
        for t in raw_targets or []:
            if not isinstance(t, dict) or set(t) - {"dp_rank", "stage"} or \
                    not all(_is_int(t.get(k)) for k in ("dp_rank", "stage")):
                raise InputError(f"{ctx}: each target is {{dp_rank: D, stage: S}}, got {t!r}",
                                 where)
            if not (0 <= t["dp_rank"] < dp and 0 <= t["stage"] < pp):
                raise InputError(f"{ctx}: target {t} outside the layout dp={dp}, pp={pp}", where)
            if any(x.dp_rank == t["dp_rank"] and x.stage == t["stage"] for x in targets):
                raise InputError(f"{ctx}: target {t} is listed twice; list each worker once",
                                 where)
            targets.append(Target(t["stage"] * dp + t["dp_rank"], t["dp_rank"], t["stage"]))
        first, last = entry.get("first_step", 0), entry.get("last_step")
        if not _is_int(first) or not 0 <= first < steps or \
                (last is not None and (not _is_int(last) or not first <= last)):
            raise InputError(f"{ctx}: need 0 <= first_step < run.steps={steps} and "
                             f"last_step null or >= first_step (got {first}, {last})", where)
        params = entry.get("params")
        params = {} if params is None else params
        if not isinstance(params, dict):
            raise InputError(f"{ctx}: params must be a mapping", where)
        specs.append(FaultSpec(kind, tuple(targets), first, last, dict(params)))
    _one_fault_per_worker_and_step(specs, steps, where)
    return specs


def _one_fault_per_worker_and_step(specs: list[FaultSpec], steps: int, where: str) -> None:
    """Refuse two faults of one kind on one worker whose step windows overlap (a fault with
    no targets acts on every worker): their effects would compound there, and faults.json
    would give each the one measurement of both, true for neither."""
    ends = [steps - 1 if s.last_step is None else min(s.last_step, steps - 1) for s in specs]
    for j, b in enumerate(specs):
        for i, a in enumerate(specs[:j]):
            lo, hi = max(a.first_step, b.first_step), min(ends[i], ends[j])
            if a.kind is not b.kind or lo > hi:
                continue
            if a.targets and b.targets:
                shared = sorted(set(a.targets) & set(b.targets))
                if not shared:
                    continue
                worker = f"DP {shared[0].dp_rank}, stage {shared[0].stage}"
            elif a.targets or b.targets:
                t = (a.targets or b.targets)[0]
                worker = f"DP {t.dp_rank}, stage {t.stage} (the other has no targets: every worker)"
            else:
                worker = "every worker (neither names targets)"
            span = f"step {lo}" if lo == hi else f"steps {lo}-{hi}"
            raise InputError(f"faults[{i}] and faults[{j}] are both {a.kind.value} on worker "
                             f"{worker} in {span}: their effects would compound and the ground "
                             "truth would give each the one measurement of both; merge them into "
                             "one fault or give them step windows that do not overlap", where)
