"""Synthetic runs analysed the way the workflow does it, for the `whatif` detector tests:
the trace and meta written to a run folder and `stragglerlab whatif` run on it, so the
detector reads whatif/whatif.json offline. The `whatif_run` fixture (conftest.py) makes them."""

from __future__ import annotations

import itertools

from stragglerlab.analysis.detectors import Run
from stragglerlab.cli import main
from stragglerlab.trace.trace_io import write_trace

_FOLDERS = itertools.count()


def analysed(run: Run, root) -> Run:
    """`run` as a run folder under root with whatif/whatif.json written by `stragglerlab whatif`."""
    folder = root / f"run{next(_FOLDERS)}"
    folder.mkdir()
    write_trace(run.trace, run.meta, folder / "trace.parquet")
    run.meta.dump(folder / "meta.yaml")
    assert main(["whatif", "--trace", str(folder / "trace.parquet"), "--meta",
                 str(folder / "meta.yaml"), "--out", str(folder / "whatif"), "--quiet"]) == 0
    run.path = str(folder)
    return run


def cells(finding) -> list[tuple[int, int]]:
    """(dp_rank, stage) of the workers a finding names, in its order."""
    return [(r.dp_rank, r.stage) for r in finding.ranks]
