"""One what-if result, whichever model made it (`WhatIfSummary`), and its JSON form: the
`summary` block both writers put in whatif.json.

Two models write whatif.json: the vocabulary what-if (analysis/whatif.py, on ops named by
the Megatron op vocabulary; top-level `slowdown`, `simulation_discrepancy`,
`slowdown_by_dp_rank`, ...) and the general op model of an unannotated import
(analysis/whatif_general.py; `S`, `discrepancy`, `by_rank`, ...). Both keep those keys
(the artifact's expected outputs and the exactness tests read them) and both add one
`summary` block with the same names and units (`SUMMARY_SCHEMA`, docs/whatif.md
"The summary"). Readers take a `WhatIfSummary`: the figures of one job, `plot`, the
API's `summary()`, `detect` and the monitor; none asks which model made it.

    s = result.summary()                         # from a fresh WhatIfResult / GeneralWhatIf
    s = read_whatif_summary("run/whatif/whatif.json")   # stragglerlab.run.whatif_reader
    s.S, s.discrepancy, s.validity.verdict(s.S), s.workers.grid(), s.steps.s

Per-worker and per-step values are columns (numpy arrays), not one object per worker: a
job has up to tens of thousands of workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from stragglerlab.run.validity import Validity, validity_of
from stragglerlab.util.filecheck import Checker

SUMMARY_KEY = "summary"
"""The key of the summary block in whatif.json."""
SUMMARY_SCHEMA = "stragglerlab.whatif-summary/1"
"""The `schema` value inside the summary block."""
MAX_SLOWDOWN = 1e6
"""The largest slowdown a summary may hold: a job a million times slower than its ideal is
a damaged file, not a measurement (the same bound as stragglerlab.run.whatif_record's)."""


class WhatIfModel(str, Enum):
    """Which model made a what-if result."""

    VOCABULARY = "vocabulary"
    """analysis/whatif.py: the paper's method on ops named by the Megatron op vocabulary."""
    GENERAL = "general"
    """analysis/whatif_general.py: the general op model of an unannotated import (compute
    segments between communication ops, optionally the host and the device apart)."""


@dataclass(frozen=True, kw_only=True)
class WorkerS:
    """The worker score per traced worker, as columns (one entry per worker)."""

    rank: np.ndarray
    """Global rank, int, ascending (stage * dp_size + dp_rank where the layout is known)."""
    dp_rank: np.ndarray | None
    """DP rank per worker, int; None where the layout is unknown (an unannotated import
    without --layout)."""
    stage: np.ndarray | None
    """Pipeline stage per worker, int; None where the layout is unknown."""
    s: np.ndarray
    """The worker's S, a ratio: min(S_dp, S_stage) with a layout (the paper's Fig. 14
    score), else S_rank (the job with only that rank's ops original, over T_ideal)."""

    @property
    def has_layout(self) -> bool:
        """True when every worker has a DP rank and a stage."""
        return self.dp_rank is not None and self.stage is not None

    def grid(self) -> np.ndarray:
        """[stage, dp_rank] scores with a layout (NaN where no worker was traced), else one
        row [1, workers] in rank order."""
        if not self.has_layout:
            return self.s[None, :].astype(float)
        if not len(self.s):
            return np.empty((0, 0))
        out = np.full((int(self.stage.max()) + 1, int(self.dp_rank.max()) + 1), np.nan)
        out[self.stage, self.dp_rank] = self.s
        return out

    def to_json(self) -> dict:
        """Columns: `rank`, `dp_rank`, `stage` (null without a layout), `S`."""
        return {"rank": self.rank.tolist(),
                "dp_rank": None if self.dp_rank is None else self.dp_rank.tolist(),
                "stage": None if self.stage is None else self.stage.tolist(),
                "S": self.s.tolist()}


@dataclass(frozen=True, kw_only=True)
class StepS:
    """Per traced step, as columns (one entry per step, ascending)."""

    step: np.ndarray
    """Step number, int."""
    s: np.ndarray
    """S of the step: its simulated time over its ideal time, a ratio."""
    traced_s: np.ndarray
    """The step's time in the trace, s (NaN where an older file did not record it)."""
    t_s: np.ndarray
    """Simulated step time with the traced durations (T of the step), s (NaN: not
    recorded)."""
    t_ideal_s: np.ndarray
    """Simulated step time with idealized durations (T_ideal of the step), s (NaN: not
    recorded)."""

    @property
    def has_times(self) -> bool:
        """True when every step's traced, simulated and ideal time is recorded."""
        return bool(np.isfinite(np.concatenate([self.traced_s, self.t_s, self.t_ideal_s]))
                    .all())

    def to_json(self) -> dict:
        """Columns: `step`, `S`, `traced_s`, `T_s`, `T_ideal_s`."""
        return {"step": self.step.tolist(), "S": self.s.tolist(),
                "traced_s": self.traced_s.tolist(), "T_s": self.t_s.tolist(),
                "T_ideal_s": self.t_ideal_s.tolist()}


@dataclass(kw_only=True)
class WhatIfSummary:
    """One what-if result: the names and units both models share (docs/whatif.md)."""

    model: WhatIfModel
    """Which model made it."""
    compute_ideal: str
    """The statistic that idealized compute ('mean', the paper's, or 'median')."""
    job_name: str
    """The job's trial name ('' when unknown)."""
    S: float
    """Job slowdown T / T_ideal (paper Eq. 1), a ratio."""
    waste: float
    """1 - 1/S (Eq. 3): the share of resources lost to stragglers."""
    T_s: float
    """Mean simulated step time with the traced durations (the paper's T), s."""
    T_ideal_s: float
    """Mean simulated step time with idealized durations, s."""
    traced_step_s: float
    """Mean traced step time, measured as the simulation measures T, s."""
    discrepancy: float
    """traced_step_s / T_s - 1: how far the simulation is from the trace (a fraction;
    the paper dropped jobs above 0.05)."""
    straggling: bool | None
    """S >= 1.1 where `validity` holds (or was forced); None: the gate withheld it."""
    validity: Validity
    """The reproduction gate (stragglerlab.run.validity): whether S may be read as the job's."""
    M_W: float | None
    """(T - T_fixW) / (T - T_ideal) fixing the top ceil(3%) workers (Eq. 5), a ratio."""
    M_S: float | None
    """The same fixing the last stage (0 without PP; None where the stage is unknown)."""
    by_kind: dict[str, float]
    """S_t per op kind: the ideal job with that kind original over T_ideal (the op types of
    the vocabulary, or `compute` and the communication kinds of the general model)."""
    by_part: dict[str, float]
    """GPU traces of the general model: 'host' and 'device' -> S leaving that part of every
    compute segment original; empty elsewhere."""
    by_dp_rank: dict[int, float] | None
    """S_dp per DP rank; None where the layout is unknown."""
    by_stage: dict[int, float] | None
    """S_stage per stage; None where the layout is unknown."""
    by_rank: dict[int, float] | None
    """S_rank per rank (the general model); None on the vocabulary path, which attributes
    by DP rank and stage."""
    workers: WorkerS
    """The worker score per worker."""
    top_workers: list[int]
    """Global ranks of the workers M_W fixes, highest score first."""
    steps: StepS
    """Per-step S and step times."""
    regime_change: dict | None = None
    """A job-wide change of the step time within the trace (analysis.regime's dict: step,
    before_s, after_s, ratio, kinds, every_rank), None when there is none."""
    fwd_bwd_correlation: float | None = None
    """Pearson correlation of forward vs backward microbatch times (the vocabulary path;
    >= 0.9 flags sequence imbalance); None where not measured."""
    host_model: bool = False
    """True: the host and the device were modelled apart (the general model on a GPU
    trace whose launches and waits are traced)."""
    notes: list[str] = field(default_factory=list)
    """What a reader should know (the file's top-level `notes`; not in the block)."""
    path: str = ""
    """The file it was read from ('' for a result in memory)."""

    def to_json(self) -> dict:
        """The `summary` block of whatif.json (names and units as the fields above)."""
        def table(t):
            return None if t is None else {str(k): float(v) for k, v in t.items()}

        return {
            "schema": SUMMARY_SCHEMA, "model": self.model.value,
            "compute_ideal": self.compute_ideal, "job_name": self.job_name,
            "S": float(self.S), "waste": float(self.waste), "T_s": float(self.T_s),
            "T_ideal_s": float(self.T_ideal_s), "traced_step_s": float(self.traced_step_s),
            "discrepancy": float(self.discrepancy), "straggling": self.straggling,
            "validity": self.validity.to_dict(),
            "M_W": None if self.M_W is None else float(self.M_W),
            "M_S": None if self.M_S is None else float(self.M_S),
            "by_kind": table(self.by_kind), "by_part": table(self.by_part),
            "by_dp_rank": table(self.by_dp_rank), "by_stage": table(self.by_stage),
            "by_rank": table(self.by_rank), "workers": self.workers.to_json(),
            "top_workers": [int(r) for r in self.top_workers],
            "steps": self.steps.to_json(), "regime_change": self.regime_change,
            "fwd_bwd_correlation": self.fwd_bwd_correlation, "host_model": self.host_model,
        }


def _floats(chk: Checker, raw: object, where: str, n: int | None = None,
            minimum: float | None = None) -> np.ndarray:
    """A JSON list of finite numbers (n of them when given) as a float array."""
    values = chk.listing(raw, where)
    if n is not None and len(values) != n:
        chk.fail(where, f"has {len(values)} entries, the summary has {n}")
    if not all(type(v) in (int, float) for v in values):
        for i, v in enumerate(values):
            chk.number(v, f"{where}[{i}]")
    out = np.asarray(values, dtype=float)
    bad = ~np.isfinite(out) | ((out < minimum) if minimum is not None else False)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        chk.number(values[i], f"{where}[{i}]", minimum=minimum)
    return out


def _ints(chk: Checker, raw: object, where: str, n: int | None = None) -> np.ndarray:
    """A JSON list of integers >= 0 (n of them when given) as an int64 array."""
    values = chk.listing(raw, where)
    if n is not None and len(values) != n:
        chk.fail(where, f"has {len(values)} entries, the summary has {n}")
    if not all(type(v) is int and v >= 0 for v in values):
        for i, v in enumerate(values):
            chk.integer(v, f"{where}[{i}]", 0)
    return np.asarray(values, dtype=np.int64)


def _table(chk: Checker, raw: object, where: str, int_keys: bool) -> dict | None:
    if raw is None:
        return None
    out = {}
    for k, v in chk.mapping(raw, where).items():
        key = k
        if int_keys:
            try:
                key = int(k)
            except ValueError:
                chk.fail(where, f"has a key {k!r} that is not a number")
        out[key] = chk.number(v, f"{where}.{k}", minimum=0.0, maximum=MAX_SLOWDOWN)
    return out


def check_regime_change(chk: Checker, raw: object, where: str) -> dict | None:
    """A regime_change dict (analysis.regime's), checked; None stays None."""
    if raw is None:
        return None
    rc = chk.mapping(raw, where)
    chk.integer(rc.get("step"), where + ".step", 0)
    for key in ("before_s", "after_s", "ratio"):
        chk.number(rc.get(key), f"{where}.{key}", minimum=0.0)
    for k, v in chk.mapping(rc.get("kinds", {}), where + ".kinds").items():
        chk.number(v, f"{where}.kinds.{k}", minimum=0.0)
    for k, v in chk.mapping(rc.get("every_rank", {}), where + ".every_rank").items():
        chk.boolean(v, f"{where}.every_rank.{k}")
    return rc


def check_validity(chk: Checker, raw: object, where: str) -> Validity:
    """A validity dict (Validity.to_dict), checked."""
    v = chk.mapping(raw, where)
    chk.boolean(v.get("valid"), where + ".valid")
    chk.number(v.get("discrepancy"), where + ".discrepancy")
    chk.number(v.get("limit", 0.05), where + ".limit", minimum=0.0)
    for key in ("reasons", "detail"):
        for i, r in enumerate(chk.listing(v.get(key, []), f"{where}.{key}")):
            chk.string(r, f"{where}.{key}[{i}]")
    chk.boolean(v.get("forced", False), where + ".forced")
    return Validity.from_dict(v)


def summary_from_block(chk: Checker, raw: object, notes: list[str] | None = None
                       ) -> WhatIfSummary:
    """The `summary` block of a whatif.json, every field checked (one InputError naming
    `summary.<field>`, with the checker's fix)."""
    w = "summary."
    b = chk.mapping(raw, "summary")
    if b.get("schema") != SUMMARY_SCHEMA:
        chk.fail(w + "schema", f"is {str(b.get('schema'))[:60]!r}, this stragglerlab reads "
                 f"{SUMMARY_SCHEMA!r} (a newer stragglerlab wrote it, or it was edited)")
    try:
        model = WhatIfModel(b.get("model"))
    except ValueError:
        chk.fail(w + "model", f"is {str(b.get('model'))[:40]!r}, not one of "
                 + ", ".join(m.value for m in WhatIfModel))
    ideal = chk.string(b.get("compute_ideal"), w + "compute_ideal")
    if ideal not in ("mean", "median"):
        chk.fail(w + "compute_ideal", f"is {ideal[:40]!r}, not 'mean' or 'median'")
    S = chk.number(b.get("S"), w + "S", minimum=0.0, maximum=MAX_SLOWDOWN)
    if S == 0.0:
        chk.fail(w + "S", "is 0: must be > 0")
    times = {k: chk.number(b.get(k), w + k, minimum=0.0)
             for k in ("T_s", "T_ideal_s", "traced_step_s")}
    disc = chk.number(b.get("discrepancy"), w + "discrepancy", minimum=-1.0)
    straggling = b.get("straggling")
    if straggling is not None:
        chk.boolean(straggling, w + "straggling")
    validity = check_validity(chk, b.get("validity"), w + "validity")
    if not abs(validity.discrepancy - disc) <= 1e-9:
        chk.fail(w + "validity.discrepancy", f"is {validity.discrepancy}, summary.discrepancy "
                 f"is {disc}: the file's parts disagree")
    wk = chk.mapping(b.get("workers"), w + "workers")
    rank = _ints(chk, wk.get("rank"), w + "workers.rank")
    n = len(rank)
    coords = {k: None if wk.get(k) is None else _ints(chk, wk.get(k), f"{w}workers.{k}", n)
              for k in ("dp_rank", "stage")}
    if (coords["dp_rank"] is None) != (coords["stage"] is None):
        chk.fail(w + "workers", "has one of dp_rank and stage without the other")
    st = chk.mapping(b.get("steps"), w + "steps")
    step = _ints(chk, st.get("step"), w + "steps.step")
    if np.any(np.diff(step) <= 0):
        chk.fail(w + "steps.step", "must list the step numbers ascending, each once")
    m = len(step)
    steps = StepS(step=step, s=_floats(chk, st.get("S"), w + "steps.S", m, 0.0),
                  **{k: _floats(chk, st.get(j), f"{w}steps.{j}", m, 0.0)
                     for k, j in (("traced_s", "traced_s"), ("t_s", "T_s"),
                                  ("t_ideal_s", "T_ideal_s"))})
    corr = chk.number(b.get("fwd_bwd_correlation"), w + "fwd_bwd_correlation", -1.0, 1.0,
                      optional=True)
    return WhatIfSummary(
        model=model, compute_ideal=ideal,
        job_name=chk.string(b.get("job_name", ""), w + "job_name"), S=S,
        waste=chk.number(b.get("waste"), w + "waste", maximum=1.0),
        T_s=times["T_s"], T_ideal_s=times["T_ideal_s"], traced_step_s=times["traced_step_s"],
        discrepancy=disc, straggling=straggling, validity=validity,
        M_W=chk.number(b.get("M_W"), w + "M_W", optional=True),
        M_S=chk.number(b.get("M_S"), w + "M_S", optional=True),
        by_kind=_table(chk, b.get("by_kind"), w + "by_kind", False) or {},
        by_part=_table(chk, b.get("by_part"), w + "by_part", False) or {},
        by_dp_rank=_table(chk, b.get("by_dp_rank"), w + "by_dp_rank", True),
        by_stage=_table(chk, b.get("by_stage"), w + "by_stage", True),
        by_rank=_table(chk, b.get("by_rank"), w + "by_rank", True),
        workers=WorkerS(rank=rank, s=_floats(chk, wk.get("S"), w + "workers.S", n, 0.0),
                        **coords),
        top_workers=[chk.integer(r, f"{w}top_workers[{i}]", 0) for i, r in
                     enumerate(chk.listing(b.get("top_workers"), w + "top_workers"))],
        steps=steps,
        regime_change=check_regime_change(chk, b.get("regime_change"), w + "regime_change"),
        fwd_bwd_correlation=corr,
        host_model=chk.boolean(b.get("host_model", False), w + "host_model"),
        notes=list(notes or []), path=chk.path)


def _series(table: dict | None, steps: list[int]) -> np.ndarray:
    """{step: value} as an array over `steps` (NaN where the table lacks a step)."""
    table = table or {}
    return np.array([float(table[str(s)]) if str(s) in table else np.nan for s in steps],
                    dtype=float)


def summary_of_general(doc: dict, notes: list[str] | None = None,
                       path: str = "") -> WhatIfSummary:
    """The summary of the general model's fields (`GeneralWhatIf`'s, as whatif.json holds
    them; the reader has checked them). Files written before some fields existed read with
    their defaults: per-step times NaN, the mean ideal, the gate their discrepancy gives."""
    def ints(table: dict | None) -> dict[int, float] | None:
        return None if table is None else {int(k): float(v) for k, v in table.items()}

    S = float(doc["S"])
    discrepancy = float(doc["discrepancy"])
    validity = validity_of(doc, discrepancy)
    steps = sorted(int(k) for k in doc["per_step"])
    score = {int(k): float(v) for k, v in doc["worker_score"].items()}
    ranks = np.array(sorted(score), dtype=np.int64)
    coords = doc.get("worker_coords") or {}
    dp_rank = stage = None
    if coords:
        dp_rank = np.array([int(coords[str(r)][0]) for r in ranks], dtype=np.int64)
        stage = np.array([int(coords[str(r)][1]) for r in ranks], dtype=np.int64)
    straggling = doc.get("straggling")
    return WhatIfSummary(
        model=WhatIfModel.GENERAL, compute_ideal=doc.get("compute_ideal", "mean"),
        job_name="", S=S, waste=float(doc.get("waste", 1.0 - 1.0 / S)),
        T_s=float(doc["T"]), T_ideal_s=float(doc["T_ideal"]),
        traced_step_s=float(doc["actual_step_s"]), discrepancy=discrepancy,
        straggling=validity.verdict(S) if "validity" not in doc else straggling,
        validity=validity,
        M_W=None if doc.get("M_W") is None else float(doc["M_W"]),
        M_S=None if doc.get("M_S") is None else float(doc["M_S"]),
        by_kind={str(k): float(v) for k, v in (doc.get("by_kind") or {}).items()},
        by_part={str(k): float(v) for k, v in (doc.get("by_segment_part") or {}).items()},
        by_dp_rank=ints(doc.get("by_dp")), by_stage=ints(doc.get("by_stage")),
        by_rank=ints(doc.get("by_rank")),
        workers=WorkerS(rank=ranks, dp_rank=dp_rank, stage=stage,
                        s=np.array([score[r] for r in ranks.tolist()], dtype=float)),
        top_workers=[int(r) for r in doc.get("top_workers") or []],
        steps=StepS(step=np.array(steps, dtype=np.int64),
                    s=np.array([float(doc["per_step"][str(s)]) for s in steps], dtype=float),
                    traced_s=_series(doc.get("step_time_actual_s"), steps),
                    t_s=_series(doc.get("step_time_simulated_s"), steps),
                    t_ideal_s=_series(doc.get("step_time_ideal_s"), steps)),
        regime_change=doc.get("regime_change"), fwd_bwd_correlation=None,
        host_model=bool(doc.get("host_model", False)),
        notes=list(notes if notes is not None else doc.get("notes") or []), path=path)


def check_agrees(chk: Checker, summary: WhatIfSummary, model: WhatIfModel, ideal: str,
                 S: float, discrepancy: float, steps: list[int]) -> None:
    """The summary block says what the file's own fields say (a block edited or pasted from
    another result would be drawn while the numbers beside it disagree)."""
    if summary.model is not model:
        chk.fail("summary.model", f"is {summary.model.value!r} in a file of the {model.value} "
                 "model")
    if summary.compute_ideal != ideal:
        chk.fail("summary.compute_ideal", f"is {summary.compute_ideal!r}, the file's is "
                 f"{ideal!r}")
    for name, mine, theirs in (("S", summary.S, S), ("discrepancy", summary.discrepancy,
                                                      discrepancy)):
        if not abs(mine - theirs) <= 1e-9 * max(1.0, abs(theirs)):
            chk.fail(f"summary.{name}", f"is {mine}, the file's own field says {theirs}: the "
                     "file's parts disagree")
    if summary.steps.step.tolist() != list(steps):
        chk.fail("summary.steps.step", "lists other steps than the file's: the file's parts "
                 "disagree")


def check_summary_block(chk: Checker, doc: dict) -> WhatIfSummary | None:
    """The vocabulary file's summary block, checked against its own fields (None when the
    file has none)."""
    if SUMMARY_KEY not in doc:
        return None
    summary = summary_from_block(chk, doc[SUMMARY_KEY])
    check_agrees(chk, summary, WhatIfModel.VOCABULARY, doc.get("compute_ideal", "mean"),
                 chk.number(doc.get("slowdown"), "slowdown"),
                 chk.number(doc.get("simulation_discrepancy"), "simulation_discrepancy") - 1.0,
                 [int(s) for s in chk.listing(doc.get("steps"), "steps")])
    return summary
