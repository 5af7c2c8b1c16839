"""The folder `stragglerlab import kineto` writes for unannotated traces (the general op
model), and its whatif.json read back and checked (`GeneralRecord`).

Such a folder holds `ops.parquet` (the op table, `op_model.py`), `import.json` and
`whatif.json` (schema `GENERAL_WHATIF_SCHEMA`, `analysis/whatif_general.py`), and no
trace.parquet: the verbs that need the testbed's op-level trace (`detect`) say so, and
`whatif` and `plot` read this folder as it is.

    if is_general_import(folder): record = GeneralRecord.read(folder / "whatif.json")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglerlab.validity import Validity, validity_of

GENERAL_WHATIF_SCHEMA = "stragglerlab.whatif-general/1"
"""The `schema` value of whatif.json written by the general op model."""
OPS_PARQUET = "ops.parquet"
"""The op table of a general import."""


def _fix(path: str | Path) -> str:
    folder = Path(path).parent
    return f"rewrite it with `stragglerlab whatif --run {folder}` (re-analyses {OPS_PARQUET})"


def is_general_import(folder: str | Path) -> bool:
    """True for a folder of `import kineto` with the general op model: an op table and no
    op-level trace."""
    d = Path(folder)
    return (d / OPS_PARQUET).is_file() and not (d / "trace.parquet").exists()


def require_ideal(asked: str | None, written: str, where: str | Path) -> None:
    """InputError unless `asked` is unset or the compute ideal the whatif.json at `where` was
    written with (`written`): a general import's whatif.json holds one ideal."""
    from stragglerlab.errors import InputError

    if asked not in (None, written):
        folder = Path(where).parent if Path(where).name == "whatif.json" else Path(where)
        raise InputError(f"this unannotated import's what-if was written with the {written} "
                         f"compute ideal, not the {asked}; re-analyse it with `stragglerlab "
                         f"whatif --run {folder} --compute-ideal {asked}`, or drop "
                         "--compute-ideal", str(where))


def whatif_doc(result: dict, notes: list[str]) -> dict:
    """whatif.json of a general import: `GeneralWhatIf.to_dict()` with its schema and notes."""
    return {"schema": GENERAL_WHATIF_SCHEMA, **result, "notes": notes}


def general_detect_message(folder: str | Path) -> str:
    """What `detect` says for a general import (detectors read the op-level trace)."""
    return (f"{folder} is an unannotated import (the general op model: {OPS_PARQUET}, no "
            "trace.parquet); the detectors but `whatif` read the testbed's op-level trace, "
            "whose ops carry the Megatron op vocabulary. Its what-if names the straggling "
            f"ranks: `stragglerlab detect --run {folder} --detector whatif`, "
            f"{Path(folder) / 'whatif.json'} (top_workers, worker_score), or "
            f"`stragglerlab plot --run {folder}`; for the other detectors, annotate the job "
            "(docs/own-job.md) and import it again")


@dataclass(kw_only=True)
class GeneralRecord:
    """A general import's whatif.json, checked: what its pictures and readers use."""

    path: str
    """The file it came from (for messages)."""
    slowdown: float
    """The job's S."""
    steps: np.ndarray
    """Step numbers, ascending."""
    step_slowdown: np.ndarray
    """S per step."""
    step_time_actual_s: np.ndarray
    """Traced step time per step, s."""
    step_time_simulated_s: np.ndarray
    """Simulated T per step, s."""
    step_time_ideal_s: np.ndarray
    """Simulated T_ideal per step, s."""
    worker_score: np.ndarray
    """[pp, dp] with a layout (NaN where no rank was traced), else [1, ranks] in rank order."""
    ranks: list[int]
    """Traced ranks, ascending (the columns of `worker_score` without a layout)."""
    has_layout: bool
    """True when `worker_score` is [stage, DP rank]."""
    compute_ideal: str = "mean"
    """The compute ideal it was written with (files before it was recorded: mean)."""
    validity: Validity | None = None
    """The reproduction gate as recorded (older files: the one their discrepancy gives)."""

    @classmethod
    def read(cls, path: str | Path) -> GeneralRecord:
        """Read and check a general import's whatif.json; InputError naming the field."""
        from stragglerlab.filecheck import Checker, load_json

        raw = load_json(path, "whatif.json", _fix(path))
        chk = Checker(str(path), _fix(path))
        doc = chk.mapping(raw, "whatif.json")
        if doc.get("schema") != GENERAL_WHATIF_SCHEMA:
            chk.fail("schema", f"is {doc.get('schema')!r}, expected {GENERAL_WHATIF_SCHEMA!r}")
        per_step = chk.mapping(doc.get("per_step"), "per_step")
        steps = _int_keys(chk, per_step, "per_step", "a step number")

        def series(name: str) -> np.ndarray:
            table = chk.mapping(doc.get(name), name)
            missing = [s for s in steps if str(s) not in table]
            if missing:
                chk.fail(name, f"lacks step {missing[0]} (written by an older stragglerlab)")
            values = np.array([chk.number(table[str(s)], f"{name}.{s}", minimum=0.0)
                               for s in steps])
            if (values <= 0).any():
                chk.fail(name, "holds a step time of 0")
            return values

        score = chk.mapping(doc.get("worker_score"), "worker_score")
        ranks = _int_keys(chk, score, "worker_score", "a rank")
        values = {r: chk.number(score[str(r)], f"worker_score.{r}") for r in ranks}
        coords = chk.mapping(doc.get("worker_coords", {}), "worker_coords")
        grid = None
        if coords:
            cells = {}
            for r in ranks:
                pair = chk.listing(coords.get(str(r)), f"worker_coords.{r}")
                if len(pair) != 2:
                    chk.fail(f"worker_coords.{r}", "is not [dp_rank, stage]")
                cells[r] = tuple(chk.integer(v, f"worker_coords.{r}", 0, 1 << 20)
                                 for v in pair)
            dp = 1 + max(d for d, _ in cells.values())
            pp = 1 + max(p for _, p in cells.values())
            if dp * pp > 1 << 22:
                chk.fail("worker_coords", f"spans {dp} x {pp} cells")
            grid = np.full((pp, dp), np.nan)
            for r, (d, p) in cells.items():
                grid[p, d] = values[r]
        ideal = doc.get("compute_ideal", "mean")
        if ideal not in ("mean", "median"):
            chk.fail("compute_ideal", f"is {str(ideal)[:40]!r}, not 'mean' or 'median'")
        disc = chk.number(doc.get("discrepancy"), "discrepancy")
        if doc.get("validity") is not None:
            v = chk.mapping(doc["validity"], "validity")
            chk.boolean(v.get("valid"), "validity.valid")
            chk.number(v.get("discrepancy"), "validity.discrepancy")
            for i, r in enumerate(chk.listing(v.get("reasons", []), "validity.reasons")):
                chk.string(r, f"validity.reasons[{i}]")
        return cls(
            path=str(path), compute_ideal=ideal, validity=validity_of(doc, disc),
            slowdown=chk.number(doc.get("S"), "S", minimum=0.0),
            steps=np.asarray(steps, dtype=np.int64),
            step_slowdown=np.array([chk.number(per_step[str(s)], f"per_step.{s}", minimum=0.0)
                                    for s in steps]),
            step_time_actual_s=series("step_time_actual_s"),
            step_time_simulated_s=series("step_time_simulated_s"),
            step_time_ideal_s=series("step_time_ideal_s"),
            worker_score=grid if grid is not None else np.array([[values[r] for r in ranks]]),
            ranks=ranks, has_layout=grid is not None)


def _int_keys(chk, table: dict, name: str, what: str) -> list[int]:
    """The keys of a JSON object that are integers, ascending; one error otherwise."""
    try:
        keys = sorted(int(k) for k in table)
    except ValueError:
        chk.fail(name, f"has a key that is not {what}")
    if not keys:
        chk.fail(name, "is empty")
    return keys
