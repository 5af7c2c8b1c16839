"""run.json: the runtime record of one training run, typed.

`stragglerlab train` writes it beside the trace: the scenario as run, seed,
outcome (`ok` / `failed`) and the error of a failed run, which steps went into
the trace, measured step times, wall times, versions, GC pauses, ... The
fields consumers rely on are typed and validated on read; every other key is
kept in `extra` and written back unchanged.

    record = read_run_record("results/x/0/run.json", meta)    # InputError on a bad file
    record.outcome, record.error.rank, record.trace.complete_steps
    write_run_record("results/x/0/run.json", record)           # adds "schema"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.filecheck import Checker, echo, finite_or_none, load_json

RUN_SCHEMA = "stragglerlab.run/1"
"""Schema version of run.json, and of the run folder's layout (files without one: /1)."""
RUN_FIX = "rerun `stragglerlab train` to rewrite the run folder"
"""The fix a bad run.json message suggests."""
OUTCOMES = ("ok", "failed")
"""The values of `outcome`."""


@dataclass(kw_only=True)
class RunError:
    """What ended a failed run."""

    rank: int | None
    """Rank that failed (None when no single rank is to blame)."""
    kind: str
    """hang, worker-died, worker-error, interrupted, or an exception name."""
    message: str = ""
    """First line of the error."""
    extra: dict = field(default_factory=dict)
    """Further keys (reported_by, detected_after_s, ...)."""

    def to_json(self) -> dict:
        """JSON form."""
        return {"rank": self.rank, "kind": self.kind, "message": self.message, **self.extra}

    @classmethod
    def from_json(cls, raw: object, chk: Checker, world: int | None) -> RunError:
        """Validate `error` (rank inside the job when its size is known)."""
        raw = chk.mapping(raw, "error")
        rank = chk.integer(raw.get("rank"), "error.rank", 0,
                           None if world is None else world - 1, optional=True)
        kind = chk.string(raw.get("kind"), "error.kind")
        message = chk.string(raw.get("message", ""), "error.message", optional=True) or ""
        extra = {k: v for k, v in raw.items() if k not in ("rank", "kind", "message")}
        return cls(rank=rank, kind=kind, message=message, extra=extra)


@dataclass(kw_only=True)
class TraceInfo:
    """What went into trace.parquet."""

    complete_steps: list[int] = field(default_factory=list)
    """Steps every rank finished, after warm-up: the traced steps."""
    ops_recorded: int = 0
    """Op records the ranks wrote."""
    ops_dropped: int = 0
    """Records of warm-up or unfinished steps left out of the trace."""
    clock_origin_monotonic_s: float = 0.0
    """Monotonic-clock time of the trace's start_ts = 0."""

    def to_json(self) -> dict:
        """JSON form."""
        return {"complete_steps": list(self.complete_steps), "ops_recorded": self.ops_recorded,
                "ops_dropped": self.ops_dropped,
                "clock_origin_monotonic_s": self.clock_origin_monotonic_s}

    @classmethod
    def from_json(cls, raw: object, chk: Checker) -> TraceInfo:
        """Validate `trace`."""
        raw = chk.mapping(raw, "trace")
        steps = chk.listing(raw.get("complete_steps", []), "trace.complete_steps")
        return cls(complete_steps=[chk.integer(s, f"trace.complete_steps[{i}]", minimum=0)
                                   for i, s in enumerate(steps)],
                   ops_recorded=chk.integer(raw.get("ops_recorded", 0), "trace.ops_recorded", 0),
                   ops_dropped=chk.integer(raw.get("ops_dropped", 0), "trace.ops_dropped", 0),
                   clock_origin_monotonic_s=chk.number(
                       raw.get("clock_origin_monotonic_s", 0.0),
                       "trace.clock_origin_monotonic_s"))


_TYPED = ("schema", "name", "seed", "outcome", "error", "scenario", "trace", "step_time_s",
          "wall_s")


@dataclass(kw_only=True)
class RunRecord:
    """run.json of one run."""

    outcome: str
    """`ok` or `failed`."""
    error: RunError | None = None
    """Why a failed run failed (None for an ok run)."""
    name: str | None = None
    """Scenario name."""
    seed: int | None = None
    """Training seed."""
    scenario: dict = field(default_factory=dict)
    """The full scenario as run (stragglerlab.scenarios.scenario.scenario_to_dict), after
    faults shaped it."""
    trace: TraceInfo | None = None
    """What went into trace.parquet (None when no trace was assembled)."""
    step_time_s: dict[int, float | None] = field(default_factory=dict)
    """Measured step time per step (warm-up included), s; None for an unmeasured step."""
    wall_s: dict[str, float] = field(default_factory=dict)
    """Wall times of the run's phases (ray_start, train, total), s."""
    extra: dict = field(default_factory=dict)
    """Every other key (versions, host, backend, gc, loss, isolation, network, ...)."""
    schema: str = RUN_SCHEMA
    """Schema version of the file."""

    @property
    def ok(self) -> bool:
        """The run finished without error."""
        return self.outcome == "ok"

    @property
    def complete_steps(self) -> list[int]:
        """The traced steps ([] without trace info)."""
        return list(self.trace.complete_steps) if self.trace else []

    def to_json(self) -> dict:
        """run.json's document (typed fields first, then the rest as read)."""
        out: dict = {"schema": self.schema, "name": self.name, "seed": self.seed,
                     "outcome": self.outcome,
                     "error": None if self.error is None else self.error.to_json(),
                     "scenario": self.scenario}
        if self.trace is not None:
            out["trace"] = self.trace.to_json()
        out["step_time_s"] = {str(k): v for k, v in self.step_time_s.items()}
        out["wall_s"] = dict(self.wall_s)
        return {**out, **{k: v for k, v in self.extra.items() if k not in _TYPED}}

    @classmethod
    def from_json(cls, raw: object, chk: Checker, meta: JobMeta | None = None) -> RunRecord:
        """Validate a parsed run.json (a file without `schema` is an older /1 file)."""
        raw = chk.mapping(raw, "run.json")
        schema = chk.schema(raw.get("schema", RUN_SCHEMA), RUN_SCHEMA, "run record")
        outcome = raw.get("outcome")
        if outcome not in OUTCOMES:
            chk.fail("outcome", f"expected one of {', '.join(OUTCOMES)}, got {echo(outcome)}")
        world = meta.world_size if meta is not None else None
        error = None if raw.get("error") is None else RunError.from_json(raw["error"], chk, world)
        scenario = raw.get("scenario")
        scenario = chk.mapping({} if scenario is None else scenario, "scenario")
        for section in ("model", "parallel", "data", "run"):  # what readers .get() from
            if scenario.get(section) is not None:
                chk.mapping(scenario[section], f"scenario.{section}")
        if scenario.get("faults") is not None:
            chk.listing(scenario["faults"], "scenario.faults")
        parallel = scenario.get("parallel") or {}
        for key, size in (("dp", "dp_size"), ("pp", "pp_size")):
            if meta is not None and parallel.get(key) is not None and \
                    parallel[key] != getattr(meta, size):
                chk.fail(f"scenario.parallel.{key}",
                         f"is {echo(parallel[key])} while meta.yaml says {size}="
                         f"{getattr(meta, size)}: one of them is another run's")
        trace = None if raw.get("trace") is None else TraceInfo.from_json(raw["trace"], chk)
        steps = chk.mapping(raw.get("step_time_s") or {}, "step_time_s")
        step_time: dict[int, float | None] = {}
        for k, v in steps.items():
            try:
                step = int(k)
            except ValueError:
                chk.fail("step_time_s", f"key {echo(k)} is not a step number")
            step_time[step] = chk.number(v, f"step_time_s.{k}", minimum=0.0, optional=True)
        wall = chk.mapping(raw.get("wall_s") or {}, "wall_s")
        return cls(outcome=outcome, error=error,
                   name=chk.string(raw.get("name"), "name", optional=True),
                   seed=chk.integer(raw.get("seed"), "seed", minimum=0, optional=True),
                   scenario=scenario, trace=trace, step_time_s=step_time,
                   wall_s={k: chk.number(v, f"wall_s.{k}", minimum=0.0) for k, v in wall.items()},
                   extra={k: v for k, v in raw.items() if k not in _TYPED}, schema=schema)


def read_run_record(path: str | Path, meta: JobMeta | None = None) -> RunRecord:
    """Read and validate run.json (error.rank checked against meta's world size)."""
    return RunRecord.from_json(load_json(path, "run record (run.json)", RUN_FIX),
                               Checker(path, RUN_FIX), meta)


def write_run_record(path: str | Path, record: RunRecord) -> dict:
    """Write run.json atomically (strict JSON: NaN becomes null); returns the document written."""
    doc = finite_or_none(record.to_json())
    atomic_write_json(path, doc)
    return doc
