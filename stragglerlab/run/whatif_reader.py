"""The one reader of whatif.json, whichever model wrote it and whenever: a `WhatIfSummary`.

    s = read_whatif_summary("results/slow-worker-1/0")          # a run folder,
    s = read_whatif_summary("imported")                          # an unannotated import,
    s = read_whatif_summary("ow/whatif.json", compute_ideal="median")   # or the file

What it reads:

* the vocabulary what-if's file (schema `stragglerlab.whatif/2`, analysis/whatif.py),
  checked whole by `WhatIfRecord` (every field, the summary block included);
* the general op model's (schema `stragglerlab.whatif-general/1`, an unannotated
  import), checked field by field;
* files written before the `summary` block: the summary is derived from their own
  fields, with the same names and units; step times an older general file did not record
  read as NaN (`StepS.has_times`), and one without a recorded gate gets the gate its
  discrepancy gives;
* the vocabulary layout written before schema versions (no `schema`,
  tests/data/run_folder_v0): derived from the fields it has.

Anything else (another schema, a damaged field) is one InputError naming the file and the
field, with the command that rewrites it. A file with a `summary` block must hold every
field its writer writes: a missing one is damage, not age.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stragglerlab.run.general_record import GENERAL_WHATIF_SCHEMA, OPS_PARQUET, require_ideal
from stragglerlab.run.results import COMPUTE_IDEALS
from stragglerlab.run.validity import validity_of
from stragglerlab.run.whatif_record import WhatIfRecord, check_document
from stragglerlab.run.whatif_summary import (
    SUMMARY_KEY,
    StepS,
    WhatIfModel,
    WhatIfSummary,
    WorkerS,
    check_agrees,
    check_regime_change,
    check_validity,
    summary_from_block,
    summary_of_general,
)
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import Checker, load_json

__all__ = ["locate_whatif", "read_whatif_summary", "summary_of_document"]

GENERAL_FAMILY = GENERAL_WHATIF_SCHEMA.rsplit("/", 1)[0] + "/"


def _fix(path: str | Path) -> str:
    """How to rewrite the whatif.json at `path` (the folder it lies in)."""
    folder = Path(path).parent
    if folder.name == "whatif" and not (folder / OPS_PARQUET).exists():
        folder = folder.parent  # a run folder's whatif/whatif.json
    return f"rewrite it with `stragglerlab whatif --run {folder}`"


def locate_whatif(path: str | Path) -> Path:
    """The whatif.json of `path`: the file itself, a run folder's whatif/whatif.json, or an
    unannotated import's whatif.json; InputError naming what to run when there is none."""
    p = Path(path)
    if not p.is_dir():
        return p  # load_json names a missing or unreadable file
    for candidate in (p / "whatif" / "whatif.json", p / "whatif.json"):
        if candidate.is_file():
            return candidate
    raise InputError("no what-if result here (whatif/whatif.json or whatif.json); run "
                     f"`stragglerlab whatif --run {p}` first", str(p))


def read_whatif_summary(path: str | Path, compute_ideal: str | None = None) -> WhatIfSummary:
    """The what-if result at `path` (a whatif.json, or a folder holding one) under
    `compute_ideal` (default: the file's own); InputError for a missing, damaged or foreign
    file, or an ideal the file does not hold."""
    where = locate_whatif(path)
    raw = load_json(where, "what-if result (whatif.json)", _fix(where))
    return summary_of_document(raw, str(where), compute_ideal)


def summary_of_document(raw: object, path: str = "whatif.json",
                        compute_ideal: str | None = None) -> WhatIfSummary:
    """A parsed whatif.json as a WhatIfSummary (see the module doc)."""
    chk = Checker(path, _fix(path))
    doc = chk.mapping(raw, "whatif.json")
    schema = doc.get("schema")
    if isinstance(schema, str) and schema.startswith(GENERAL_FAMILY):
        if schema != GENERAL_WHATIF_SCHEMA:
            chk.fail("schema", f"is {schema[:60]!r}, this stragglerlab reads "
                     f"{GENERAL_WHATIF_SCHEMA!r} (a newer stragglerlab wrote it, or it was "
                     "edited)")
        return _general(chk, doc, compute_ideal)
    if "schema" not in doc:
        checked, _ = check_document(doc, path)
        return _before_versions(chk, checked, compute_ideal)
    return _vocabulary(WhatIfRecord.from_json(doc, path), compute_ideal)


def _vocabulary(record: WhatIfRecord, compute_ideal: str | None) -> WhatIfSummary:
    """A vocabulary what-if's file (checked whole by WhatIfRecord): its summary block
    under its own ideal, else the summary derived from the ideal's block."""
    name = compute_ideal or record.compute_ideal
    notes = [n for n in record.doc.get("notes") or [] if isinstance(n, str)]
    if name == record.compute_ideal and record.summary is not None:
        record.summary.notes = notes
        return record.summary
    view = record.ideal(name)
    doc = record.doc
    chk = Checker(record.path, _fix(record.path))
    block = doc["compute_ideals"][name]
    steps = record.steps
    s = _series(chk, block.get("step_slowdown"), f"compute_ideals.{name}.step_slowdown",
                steps, required=True)
    t = _series(chk, doc.get("step_time_nodelay_s"), "step_time_nodelay_s", steps)
    pp, dp = view.worker_score.shape
    stage, dp_rank = np.divmod(np.arange(pp * dp, dtype=np.int64), dp)
    disc = float(doc["simulation_discrepancy"]) - 1.0
    return WhatIfSummary(
        model=WhatIfModel.VOCABULARY, compute_ideal=name,
        job_name=record.job_meta.trial_name or "", S=view.slowdown, waste=view.waste,
        T_s=float(doc["t_nodelay_s"]), T_ideal_s=view.t_ideal_s,
        traced_step_s=float(doc.get("t_actual_s", np.nan)), discrepancy=disc,
        straggling=block.get("straggling"), validity=record.validity,
        M_W=view.m_w.rem, M_S=view.m_s.rem, by_kind=dict(view.slowdown_by_optype),
        by_part={}, by_dp_rank=dict(enumerate(map(float, view.s_dp))),
        by_stage=dict(enumerate(map(float, view.s_stage))), by_rank=None,
        workers=WorkerS(rank=stage * dp + dp_rank, dp_rank=dp_rank, stage=stage,
                        s=np.asarray(view.worker_score, dtype=float).ravel()),
        top_workers=[int(p * dp + d) for d, p in view.top_workers],
        steps=StepS(step=np.asarray(steps, dtype=np.int64), s=s,
                    traced_s=_series(chk, doc.get("step_time_actual_s"),
                                     "step_time_actual_s", steps),
                    t_s=t, t_ideal_s=t / s),
        regime_change=doc.get("regime_change"),
        fwd_bwd_correlation=record.fwd_bwd_correlation, notes=notes, path=record.path)


def _before_versions(chk: Checker, doc: dict, compute_ideal: str | None) -> WhatIfSummary:
    """The vocabulary layout written before schema versions (checked by check_document):
    the mean ideal only, the fields it has."""
    if compute_ideal not in (None, "mean"):
        chk.fail("compute_ideal", f"this whatif.json (written before schema versions) holds "
                 f"the mean compute ideal only, not the {compute_ideal}")
    if doc.get("slowdown") is None:
        chk.fail("slowdown", "is null: the analysis could not handle this run")
    S = float(doc["slowdown"])
    disc = (float(doc["simulation_discrepancy"]) - 1.0
            if doc.get("simulation_discrepancy") is not None else float("nan"))
    validity = validity_of(doc, disc)
    grid = np.asarray(doc.get("worker_score") or np.empty((0, 0)), dtype=float)
    if grid.ndim != 2:
        chk.fail("worker_score", "is not a [stage][dp_rank] table")
    pp, dp = grid.shape
    stage, dp_rank = np.divmod(np.arange(pp * dp, dtype=np.int64), max(dp, 1))
    steps = [int(s) for s in doc.get("steps") or sorted(
        (doc.get("step_slowdown") or {}), key=int)]
    s = _series(chk, doc.get("step_slowdown"), "step_slowdown", steps)
    t = _series(chk, doc.get("step_time_nodelay_s"), "step_time_nodelay_s", steps)

    def rem(key: str) -> float | None:
        m = doc.get(key)
        return float(m["rem"]) if isinstance(m, dict) and m.get("rem") is not None else None

    def table(key: str) -> dict[int, float] | None:
        t = doc.get(key)
        return None if t is None else {int(k): float(v) for k, v in t.items()}

    return WhatIfSummary(
        model=WhatIfModel.VOCABULARY, compute_ideal="mean", job_name="", S=S,
        waste=float(doc.get("waste", 1.0 - 1.0 / S)),
        T_s=float(doc.get("t_nodelay_s", np.nan)), T_ideal_s=float(doc.get("t_ideal_s", np.nan)),
        traced_step_s=float(doc.get("t_actual_s", np.nan)), discrepancy=disc,
        straggling=validity.verdict(S), validity=validity, M_W=rem("m_w"), M_S=rem("m_s"),
        by_kind={str(k): float(v) for k, v in (doc.get("slowdown_by_optype") or {}).items()},
        by_part={}, by_dp_rank=table("slowdown_by_dp_rank"),
        by_stage=table("slowdown_by_stage"), by_rank=None,
        workers=WorkerS(rank=stage * dp + dp_rank, dp_rank=dp_rank, stage=stage,
                        s=grid.ravel()),
        top_workers=[int(w["stage"]) * dp + int(w["dp_rank"])
                     for w in doc.get("top_workers") or []],
        steps=StepS(step=np.asarray(steps, dtype=np.int64), s=s,
                    traced_s=_series(chk, doc.get("step_time_actual_s"),
                                     "step_time_actual_s", steps),
                    t_s=t, t_ideal_s=t / s),
        regime_change=doc.get("regime_change"),
        fwd_bwd_correlation=doc.get("fwd_bwd_correlation"),
        notes=[n for n in doc.get("notes") or [] if isinstance(n, str)], path=chk.path)


def _series(chk: Checker, raw: object, where: str, steps: list[int],
            required: bool = False) -> np.ndarray:
    """{step: value} over `steps` as an array; NaN where absent unless `required`."""
    if raw is None and not required:
        return np.full(len(steps), np.nan)
    table = chk.mapping(raw, where)
    missing = [s for s in steps if str(s) not in table]
    if missing and required:
        chk.fail(where, f"lacks step {missing[0]}")
    return np.array([chk.number(table[str(s)], f"{where}.{s}", minimum=0.0)
                     if str(s) in table else np.nan for s in steps], dtype=float)


def _int_keys(chk: Checker, table: dict, name: str, what: str) -> list[int]:
    """The keys of a JSON object that are integers, ascending; one error otherwise."""
    try:
        keys = sorted(int(k) for k in table)
    except ValueError:
        chk.fail(name, f"has a key that is not {what}")
    if not keys:
        chk.fail(name, "is empty")
    return keys


def _general(chk: Checker, doc: dict, compute_ideal: str | None) -> WhatIfSummary:
    """The general op model's file: its fields checked, then its summary block (or, in a
    file written before it, the summary of its fields)."""
    chk.fix = (f"rewrite it with `stragglerlab whatif --run {Path(chk.path).parent}` "
               f"(re-analyses {OPS_PARQUET})")
    has_block = SUMMARY_KEY in doc
    per_step = chk.mapping(doc.get("per_step"), "per_step")
    steps = _int_keys(chk, per_step, "per_step", "a step number")
    for s in steps:
        chk.number(per_step[str(s)], f"per_step.{s}", minimum=0.0)
    for name in ("step_time_actual_s", "step_time_simulated_s", "step_time_ideal_s"):
        if doc.get(name) is None and not has_block:
            continue  # written before the per-step times: read as NaN
        values = _series(chk, doc.get(name), name, steps, required=True)
        if (values <= 0).any():
            chk.fail(name, "holds a step time of 0")
    score = chk.mapping(doc.get("worker_score"), "worker_score")
    ranks = _int_keys(chk, score, "worker_score", "a rank")
    for r in ranks:
        chk.number(score[str(r)], f"worker_score.{r}")
    coords = chk.mapping(doc.get("worker_coords", {}), "worker_coords")
    if coords:
        for r in ranks:
            pair = chk.listing(coords.get(str(r)), f"worker_coords.{r}")
            if len(pair) != 2:
                chk.fail(f"worker_coords.{r}", "is not [dp_rank, stage]")
            for v in pair:
                chk.integer(v, f"worker_coords.{r}", 0, 1 << 20)
    ideal = doc.get("compute_ideal", "mean")
    if ideal not in COMPUTE_IDEALS:
        chk.fail("compute_ideal", f"is {str(ideal)[:40]!r}, not 'mean' or 'median'")
    require_ideal(compute_ideal, ideal, chk.path)
    S = chk.number(doc.get("S"), "S", minimum=0.0)
    if S == 0.0:
        chk.fail("S", "is 0: must be > 0")
    disc = chk.number(doc.get("discrepancy"), "discrepancy", minimum=-1.0)
    for key in ("T", "T_ideal", "actual_step_s"):
        chk.number(doc.get(key), key, minimum=0.0)
    for key in ("M_W", "M_S"):
        chk.number(doc.get(key), key, optional=True)
    for key in ("by_kind", "by_rank", "by_dp", "by_stage", "by_segment_part"):
        for k, v in (chk.mapping(doc[key], key).items() if doc.get(key) is not None else ()):
            chk.number(v, f"{key}.{k}", minimum=0.0)
    for i, r in enumerate(chk.listing(doc.get("top_workers", []), "top_workers")):
        chk.integer(r, f"top_workers[{i}]", 0)
    if doc.get("validity") is not None:
        check_validity(chk, doc["validity"], "validity")
    check_regime_change(chk, doc.get("regime_change"), "regime_change")
    notes = [n for n in doc.get("notes") or [] if isinstance(n, str)]
    if not has_block:
        return summary_of_general(doc, notes=notes, path=chk.path)
    summary = summary_from_block(chk, doc[SUMMARY_KEY], notes)
    check_agrees(chk, summary, WhatIfModel.GENERAL, ideal, S, disc, steps)
    return summary

