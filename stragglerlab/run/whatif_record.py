"""whatif.json read back and checked (`WhatIfRecord`): the reader of the format `results` writes.

Every field is checked (schema version, types, shapes against the job meta), and
a bad file is one InputError naming the file and the field, with how to fix it.

    record = WhatIfRecord.read("results/slow-worker-1/0/whatif/whatif.json")
    mean = record.ideal("mean")                  # IdealView: slowdown, worker_score, ...
    scores = mean.step_worker_score()            # [pp, dp, steps]

Readers of the document's fields as a dict (`RunFolder.whatif`: figures, report, the
noise floor) go through `check_document`, the same checks: a file with a `schema` is read
whole by WhatIfRecord, one without is the layout written before schema versions
(tests/data/run_folder_v0), each field it has checked by the same rules (`_check_fields`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglerlab.run.general_record import GENERAL_WHATIF_SCHEMA
from stragglerlab.run.results import COMPUTE_IDEALS, SCHEMA, FixMetric, IdealView
from stragglerlab.run.validity import Validity, validity_of
from stragglerlab.run.whatif_summary import WhatIfSummary, check_summary_block
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.errors import InputError

_FIX = "rerun `stragglerlab whatif` on the run (e.g. `stragglerlab whatif --run DIR`)"


@dataclass
class WhatIfRecord:
    """whatif.json read back and checked: the document, and typed views of what readers use."""

    path: str
    """The file it came from (for messages)."""
    doc: dict
    """The whole document (every key of the README's table)."""
    job_meta: JobMeta
    """Parallel layout."""
    steps: list[int]
    """Traced step numbers, ascending."""
    compute_ideal: str
    """The ideal of the top-level keys."""
    ideals: dict[str, IdealView]
    """Every compute ideal's metrics ('mean' and 'median')."""
    fwd_bwd_correlation: float | None
    """Sequence-imbalance signature (same under every ideal)."""
    comm_excess_by_worker: np.ndarray
    """[pp, dp], s: comm transfer time over the op type's median, per worker."""
    launch_by_dp_rank: np.ndarray | None = None
    """[dp, steps]: per step, the launch slowdown with only that DP rank's launch delays
    restored (`step_launch_slowdown_by_dp_rank`); None where the file has none (the job's
    launch slowdown was under 1.03, so the artifact does not attribute it)."""
    launch_by_stage: np.ndarray | None = None
    """[pp, steps]: the same per stage (`step_launch_slowdown_by_stage`), or None."""
    summary: WhatIfSummary | None = None
    """The `summary` block (stragglerlab.run.whatif_summary), checked against the fields
    beside it; None in a file written before it."""

    @property
    def validity(self) -> Validity:
        """The reproduction gate (stragglerlab.run.validity) as the file records it; files
        written before it was recorded get the one their discrepancy alone gives."""
        return validity_of(self.doc, float(self.doc["simulation_discrepancy"]) - 1.0)

    def ideal(self, name: str = "mean") -> IdealView:
        """One compute ideal's metrics; InputError when the file lacks it."""
        if name not in self.ideals:
            raise InputError(f"whatif.json has no compute_ideals.{name}; {_FIX}", self.path)
        return self.ideals[name]

    @classmethod
    def read(cls, path: str | Path) -> WhatIfRecord:
        """Read and check whatif.json; InputError naming the file when missing or malformed."""
        from stragglerlab.util.filecheck import load_json

        raw = load_json(path, "whatif.json", _FIX)
        return cls.from_json(raw, str(path))

    @classmethod
    def from_json(cls, raw: object, path: str = "whatif.json") -> WhatIfRecord:
        """Check a parsed whatif.json document (schema version, fields, shapes)."""
        from stragglerlab.util.filecheck import Checker

        chk = Checker(path, _FIX)
        doc = chk.mapping(raw, "whatif.json")
        schema = doc.get("schema")
        if schema == GENERAL_WHATIF_SCHEMA:  # not older or newer: another model's result
            folder = Path(path).parent
            raise InputError(f"this is the what-if of an unannotated import (the general op "
                             f"model, {schema}), which has no per-op-type record; read it with "
                             "stragglerlab.run.whatif_reader.read_whatif_summary, or draw it: "
                             f"`stragglerlab plot --run {folder}`", path)
        if schema != SCHEMA:
            chk.fail("schema", f"is {schema!r}, this stragglerlab reads {SCHEMA!r} (an older "
                               "or newer whatif.json)")
        _check_fields(chk, doc)
        meta = JobMeta.from_dict(chk.mapping(doc.get("job_meta"), "job_meta"), path)
        steps = [chk.integer(s, f"steps[{i}]")
                 for i, s in enumerate(chk.listing(doc.get("steps"), "steps"))]
        if not steps:
            chk.fail("steps", "is empty")
        pp, dp = meta.pp_size, meta.dp_size
        compute_ideal = chk.string(doc.get("compute_ideal"), "compute_ideal")
        blocks = chk.mapping(doc.get("compute_ideals"), "compute_ideals")
        missing = [n for n in COMPUTE_IDEALS if n not in blocks]
        if missing or compute_ideal not in blocks:
            chk.fail("compute_ideals", f"lacks {', '.join(missing or [compute_ideal])}")
        ideals = {name: _ideal_view(chk, name, blocks[name], steps, pp, dp) for name in blocks}
        _check_top_level(chk, doc, blocks[compute_ideal], compute_ideal)
        corr = chk.number(doc.get("fwd_bwd_correlation"), "fwd_bwd_correlation", optional=True)
        excess = _grid(chk, doc.get("comm_excess_by_worker_s"), "comm_excess_by_worker_s", pp, dp)
        launch = {name: None if doc.get(f"step_launch_slowdown_by_{name}") is None else
                  _per_step(chk, doc[f"step_launch_slowdown_by_{name}"],
                            f"step_launch_slowdown_by_{name}", steps, n)
                  for name, n in (("dp_rank", dp), ("stage", pp))}
        summary = check_summary_block(chk, doc)
        return cls(path, doc, meta, steps, compute_ideal, ideals, corr, excess,
                   launch["dp_rank"], launch["stage"], summary)


def check_document(raw: object, path: str,
                   meta: JobMeta | None = None) -> tuple[dict, WhatIfRecord | None]:
    """A parsed whatif.json as a checked dict, and the WhatIfRecord that checked it (None
    for the layout before schema versions), so a reader of both parses it once.

    With a `schema` it must be this stragglerlab's and is checked whole (WhatIfRecord,
    as `plot` reads it). Without one it is the layout written before schema versions:
    every field it has is checked by the same rules, and `slowdown` must be there (null
    marks a run the analysis could not handle). `meta` (the run folder's meta.yaml):
    the file's job_meta must describe the same layout, else it is another job's result."""
    from stragglerlab.util.filecheck import Checker

    chk = Checker(path, _FIX)
    doc = chk.mapping(raw, "whatif.json")
    if meta is not None and doc.get("job_meta") is not None:
        # First: another job's result fails every shape check, this names the cause.
        _same_layout(chk, JobMeta.from_dict(chk.mapping(doc["job_meta"], "job_meta"), path),
                     meta)
    record = None
    if "schema" in doc:
        record = WhatIfRecord.from_json(doc, path)
    elif "compute_ideals" in doc:  # came with schema 2: not the older layout, damaged
        chk.fail("schema", f"missing from a whatif.json with compute_ideals ({SCHEMA})")
    else:
        _check_fields(chk, doc, versioned=False)
        check_summary_block(chk, doc)
        if "slowdown" not in doc:
            chk.fail("slowdown", "missing: every what-if result has it (null marks a run the "
                     "analysis could not handle)")
        if doc["slowdown"] is not None and doc.get("step_time_actual_s") is None \
                and doc.get("t_actual_s") is None:
            # Figures weigh each run by its step times; without them they would print NaN.
            chk.fail("step_time_actual_s", "missing: a what-if result with a slowdown has "
                     "its step times")
    chk.finite_tree(doc, "whatif")
    return doc, record


def _same_layout(chk, theirs: JobMeta, ours: JobMeta) -> None:
    for key in ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size"):
        if getattr(theirs, key) != getattr(ours, key):
            chk.fail(f"job_meta.{key}", f"is {getattr(theirs, key)}, the run folder's "
                     f"meta.yaml says {getattr(ours, key)}: the result is of another job")


MAX_SLOWDOWN = 1e6
"""The largest slowdown (a ratio of times) a what-if result may hold: a job a million
times slower than its ideal is a damaged file, not a measurement (plotted, such values
overflow the colour scale)."""
_POSITIVE = ("slowdown", "t_actual_s", "t_nodelay_s")
"""A ratio of two times, or a step's time: 0 is no job (and 1/S divides by it)."""
_AT_LEAST_0 = ("simulation_discrepancy", "t_ideal_s")
"""A ratio of times, a time: never negative."""
_LAUNCH = ("launch_slowdown_by_optype", "launch_slowdown_by_stage", "launch_slowdown_by_dp_rank",
           "step_launch_slowdown_by_optype", "step_launch_slowdown_by_stage",
           "step_launch_slowdown_by_dp_rank")
_TABLES = ("step_slowdown", "slowdown_by_optype", "slowdown_by_dp_rank", "slowdown_by_stage",
           "step_slowdown_by_dp_rank", "step_slowdown_by_stage", "step_slowdown_by_optype",
           *_LAUNCH)
"""Slowdowns ({key: S} or {step: {key: S}}), each >= 0."""
_NULLABLE = ("fwd_bwd_correlation", "straggling", *_LAUNCH)
"""Null in a file `whatif` writes: no correlation measured, no verdict (the reproduction
gate withheld it: `validity`), no launch attribution."""


_PER_STEP = ("step_time_actual_s", "step_time_nodelay_s", "step_slowdown",
             "step_slowdown_by_dp_rank", "step_slowdown_by_stage", "step_slowdown_by_optype",
             "step_launch_slowdown_by_optype", "step_launch_slowdown_by_stage",
             "step_launch_slowdown_by_dp_rank")
"""Tables keyed by step number: by exactly the steps `steps` lists."""


def _keyed_by_steps(chk, doc: dict, where: str, steps: list[int], has) -> None:
    """Every per-step table holds the steps `steps` lists, no more, no fewer: a file whose
    parts disagree (edited, or merged from two results) would be drawn step by step off
    by one, with nothing said."""
    want = [str(s) for s in steps]
    for key in (k for k in _PER_STEP if has(k) and isinstance(doc[k], dict)):
        got = sorted(map(str, doc[key]), key=lambda k: (len(k), k))
        if got != sorted(want, key=lambda k: (len(k), k)):
            chk.fail(where + key, f"holds steps {_few(got)} where `steps` lists "
                     f"{_few(want)}: the file's parts disagree")


def _few(keys: list[str]) -> str:
    return "[" + ", ".join(keys[:6]) + (", ...]" if len(keys) > 6 else "]")


def _check_fields(chk, doc: dict, where: str = "", versioned: bool = True) -> None:
    """Each field `doc` has, by the rules of its kind; `where` prefixes the field names of
    a compute_ideals block. Null is a field's absence in `_NULLABLE`, and in a file of the
    layout before versions (`versioned` False: its reader always took it so). Presence is
    the caller's to require."""
    def has(key: str) -> bool:
        return key in doc and (doc[key] is not None or (versioned and key not in _NULLABLE))

    def number(key: str, **bounds) -> float | None:
        return chk.number(doc[key], where + key, **bounds) if has(key) else None

    for key in _POSITIVE:
        cap = MAX_SLOWDOWN if key == "slowdown" else None
        if number(key, minimum=0.0, maximum=cap) == 0.0:
            chk.fail(where + key, "is 0: must be > 0")
    for key in _AT_LEAST_0:
        number(key, minimum=0.0)
    number("waste")
    number("fwd_bwd_correlation", minimum=-1.0, maximum=1.0)  # np.corrcoef clips to it
    for key in ("step_time_actual_s", "step_time_nodelay_s"):
        for step, value in chk.mapping(doc[key], where + key).items() if has(key) else ():
            if chk.number(value, f"{where}{key}.{step}", minimum=0.0) == 0.0:
                chk.fail(f"{where}{key}.{step}", "is 0: a step takes time")
    for key in (k for k in _TABLES if has(k)):
        _number_table(chk, doc[key], where + key)
    for key in ("m_w", "m_s"):
        for name, value in chk.mapping(doc[key], where + key).items() if has(key) else ():
            chk.number(value, f"{where}{key}.{name}", optional=not versioned)
    for key in ("straggling", "sequence_imbalance"):
        if has(key):
            chk.boolean(doc[key], where + key)
    if has("validity"):
        v = chk.mapping(doc["validity"], where + "validity")
        chk.boolean(v.get("valid"), where + "validity.valid")
        d = chk.number(v.get("discrepancy"), where + "validity.discrepancy")
        if has("simulation_discrepancy") and not abs(
                d - (float(doc["simulation_discrepancy"]) - 1.0)) <= 1e-9:
            chk.fail(where + "validity.discrepancy", f"is {d}, simulation_discrepancy - 1 is "
                     f"{float(doc['simulation_discrepancy']) - 1.0}: the file's parts disagree")
        for i, r in enumerate(chk.listing(v.get("reasons", []), where + "validity.reasons")):
            chk.string(r, f"{where}validity.reasons[{i}]")
    if has("regime_change") and doc["regime_change"] is not None:
        rc = chk.mapping(doc["regime_change"], where + "regime_change")
        chk.integer(rc.get("step"), where + "regime_change.step", 0)
        for key in ("before_s", "after_s", "ratio"):
            chk.number(rc.get(key), f"{where}regime_change.{key}", minimum=0.0)
        for k, v in chk.mapping(rc.get("kinds", {}), where + "regime_change.kinds").items():
            chk.number(v, f"{where}regime_change.kinds.{k}", minimum=0.0)
        for k, v in chk.mapping(rc.get("every_rank", {}),
                                where + "regime_change.every_rank").items():
            chk.boolean(v, f"{where}regime_change.every_rank.{k}")
    if has("n_ops"):
        chk.integer(doc["n_ops"], where + "n_ops", 0)
    steps = [chk.integer(s, f"{where}steps[{i}]", minimum=0)
             for i, s in enumerate(chk.listing(doc["steps"], where + "steps") if has("steps")
                                   else ())]
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        chk.fail(where + "steps", "must list the traced step numbers ascending, each once")
    if has("steps"):
        _keyed_by_steps(chk, doc, where, steps, has)
    for i, note in enumerate(chk.listing(doc["notes"], where + "notes") if has("notes") else ()):
        chk.string(note, f"{where}notes[{i}]")
    for key, lowest in (("worker_score", 0.0), ("comm_excess_by_worker_s", None)):
        for p, row in enumerate(chk.listing(doc[key], where + key) if has(key) else ()):
            for d, v in enumerate(chk.listing(row, f"{where}{key}[{p}]")):
                chk.number(v, f"{where}{key}[{p}][{d}]", minimum=lowest)
    for i, w in enumerate(chk.listing(doc["top_workers"], where + "top_workers")
                          if has("top_workers") else ()):
        for k in ("dp_rank", "stage"):
            chk.integer(chk.mapping(w, f"{where}top_workers[{i}]").get(k),
                        f"{where}top_workers[{i}].{k}", 0)
    if has("job_meta"):
        JobMeta.from_dict(chk.mapping(doc["job_meta"], where + "job_meta"), chk.path)
    if isinstance(doc.get("compute_ideals"), dict):
        for name, block in doc["compute_ideals"].items():
            _check_fields(chk, chk.mapping(block, f"compute_ideals.{name}"),
                          f"compute_ideals.{name}.", versioned)


def _check_top_level(chk, doc: dict, block: dict, name: str) -> None:
    """The top-level copies of the chosen ideal's metrics equal its block, and the job-wide
    numbers are there (`_check_fields` checked their values): readers take either, so an
    edited or corrupted copy is bad input, not a picture that silently disagrees with the
    numbers printed beside it."""
    for key, value in block.items():
        if key in doc and doc[key] != value:
            chk.fail(key, f"differs from compute_ideals.{name}.{key} (whatif.json writes one "
                          "as a copy of the other: the file was edited or damaged)")
    chk.integer(doc.get("n_ops"), "n_ops", 0)
    for key in ("simulation_discrepancy", "t_actual_s", "t_nodelay_s"):
        chk.number(doc.get(key), key, minimum=0.0)
    for key in ("step_time_actual_s", "step_time_nodelay_s"):
        chk.mapping(doc.get(key), key)


def _number_table(chk, raw: object, field_name: str) -> None:
    """A mapping whose values are finite slowdowns (ratios, >= 0), or mappings of them
    (one level down)."""
    for k, v in chk.mapping(raw, field_name).items():
        if isinstance(v, dict):
            for k2, x in v.items():
                chk.number(x, f"{field_name}.{k}.{k2}", minimum=0.0, maximum=MAX_SLOWDOWN)
        else:
            chk.number(v, f"{field_name}.{k}", minimum=0.0, maximum=MAX_SLOWDOWN)


def _grid(chk, raw: object, field_name: str, pp: int, dp: int,
          maximum: float | None = None) -> np.ndarray:
    """A [pp][dp] list of finite numbers (in [0, maximum] when `maximum` is given)."""
    rows = chk.listing(raw, field_name)
    if len(rows) != pp:
        chk.fail(field_name, f"has {len(rows)} rows, the job has {pp} stages")
    out = np.empty((pp, dp))
    for p, row in enumerate(rows):
        cells = chk.listing(row, f"{field_name}[{p}]")
        if len(cells) != dp:
            chk.fail(f"{field_name}[{p}]", f"has {len(cells)} cells, the job has {dp} DP ranks")
        out[p] = [chk.number(v, f"{field_name}[{p}][{d}]", maximum=maximum,
                             minimum=None if maximum is None else 0.0)
                  for d, v in enumerate(cells)]
    return out


def _by_index(chk, raw: object, field_name: str, n: int) -> np.ndarray:
    """{"0": x, ..., "n-1": x} as an array [n]."""
    table = chk.mapping(raw, field_name)
    try:
        return np.array([chk.number(table[str(i)], f"{field_name}.{i}") for i in range(n)])
    except KeyError as e:
        chk.fail(field_name, f"lacks entry {e.args[0]}")


def _per_step(chk, raw: object, field_name: str, steps: list[int], n: int) -> np.ndarray:
    """{step: {"0": x, ...}} as an array [n, steps]."""
    table = chk.mapping(raw, field_name)
    out = np.empty((n, len(steps)))
    for j, s in enumerate(steps):
        if str(s) not in table:
            chk.fail(field_name, f"lacks step {s}")
        out[:, j] = _by_index(chk, table[str(s)], f"{field_name}.{s}", n)
    return out


def _fix(chk, raw: object, field_name: str) -> FixMetric:
    m = chk.mapping(raw, field_name)
    return FixMetric(**{k: chk.number(m.get(k), f"{field_name}.{k}") for k in
                        ("t_ori", "t_ideal", "t_rem", "t_add", "rem", "add")})


def _ideal_view(chk, name: str, raw: object, steps: list[int], pp: int, dp: int) -> IdealView:
    where = f"compute_ideals.{name}"
    b = chk.mapping(raw, where)
    optype = chk.mapping(b.get("slowdown_by_optype"), f"{where}.slowdown_by_optype")
    top = chk.listing(b.get("top_workers"), f"{where}.top_workers")
    return IdealView(
        name=name,
        slowdown=chk.number(b.get("slowdown"), f"{where}.slowdown", minimum=0.0,
                            maximum=MAX_SLOWDOWN),
        t_ideal_s=chk.number(b.get("t_ideal_s"), f"{where}.t_ideal_s", minimum=0.0),
        slowdown_by_optype={str(k): chk.number(v, f"{where}.slowdown_by_optype.{k}")
                            for k, v in optype.items()},
        s_dp=_by_index(chk, b.get("slowdown_by_dp_rank"), f"{where}.slowdown_by_dp_rank", dp),
        s_stage=_by_index(chk, b.get("slowdown_by_stage"), f"{where}.slowdown_by_stage", pp),
        step_s_dp=_per_step(chk, b.get("step_slowdown_by_dp_rank"),
                            f"{where}.step_slowdown_by_dp_rank", steps, dp),
        step_s_stage=_per_step(chk, b.get("step_slowdown_by_stage"),
                               f"{where}.step_slowdown_by_stage", steps, pp),
        worker_score=_grid(chk, b.get("worker_score"), f"{where}.worker_score", pp, dp,
                           MAX_SLOWDOWN),
        top_workers=[(chk.integer(chk.mapping(w, f"{where}.top_workers[{i}]").get("dp_rank"),
                                  f"{where}.top_workers[{i}].dp_rank", 0, dp - 1),
                      chk.integer(w.get("stage"), f"{where}.top_workers[{i}].stage", 0, pp - 1))
                     for i, w in enumerate(top)],
        m_w=_fix(chk, b.get("m_w"), f"{where}.m_w"),
        m_s=_fix(chk, b.get("m_s"), f"{where}.m_s"),
    )
