"""The folder `stragglerlab import kineto` writes for unannotated traces (the general op
model): what it holds and what the verbs say about it.

Such a folder holds `ops.parquet` (the op table, `op_model.py`), `import.json` and
`whatif.json` (schema `GENERAL_WHATIF_SCHEMA`, `analysis/whatif_general.py`), and no
trace.parquet: the verbs that need the testbed's op-level trace (`detect`) say so, and
`whatif` and `plot` read this folder as it is.

    if is_general_import(folder): summary = read_whatif_summary(folder)  # whatif_reader
"""

from __future__ import annotations

from pathlib import Path

GENERAL_WHATIF_SCHEMA = "stragglerlab.whatif-general/1"
"""The `schema` value of whatif.json written by the general op model."""
OPS_PARQUET = "ops.parquet"
"""The op table of a general import."""


def is_general_import(folder: str | Path) -> bool:
    """True for a folder of `import kineto` with the general op model: an op table and no
    op-level trace."""
    d = Path(folder)
    return (d / OPS_PARQUET).is_file() and not (d / "trace.parquet").exists()


def require_ideal(asked: str | None, written: str, where: str | Path) -> None:
    """InputError unless `asked` is unset or the compute ideal the whatif.json at `where` was
    written with (`written`): a general import's whatif.json holds one ideal."""
    from stragglerlab.util.errors import InputError

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
