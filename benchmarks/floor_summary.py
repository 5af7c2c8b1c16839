"""What the noise-floor scripts share (late_arrival_floor.py, stage_shift_floor.py):
their flags (`floor_args`); per-run rows with the highest reading on a fault's victim
(`victim`) and on everything else (`others`), summarised and written as JSON; and the
victims, read from faults.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def floor_args(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """RUN ... [--min-steps N] [--json OUT], described by the script's docstring."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--min-steps", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the per-run readings here")
    return ap.parse_args(argv)


def fault_targets(run_dir: Path, kind: str, field: str) -> set[int]:
    """`field` (dp_rank, stage) of every target of the run's `kind` faults (faults.json;
    empty without one)."""
    path = Path(run_dir) / "faults.json"
    if not path.exists():
        return set()
    doc = json.loads(path.read_text())
    faults = doc.get("faults", doc) if isinstance(doc, dict) else doc
    return {int(t[field]) for f in faults if f.get("kind") == kind
            for t in f.get("targets", []) if field in t}


def report(rows: list[dict], victim_label: str, json_path: Path | None) -> None:
    """Print the runs' summary line (others' max and p90, the victims' range) and write
    `rows` to `json_path` when given."""
    others = [r["others"] for r in rows if r["others"] is not None]
    victims = [r["victim"] for r in rows if r["victim"] is not None]
    if others:
        print(f"{len(rows)} runs: others max {max(others):.3f} "
              f"(p90 {np.quantile(others, 0.9):.3f}); {victim_label} "
              + (f"{min(victims):.3f}-{max(victims):.3f}" if victims else "none"))
    if json_path:
        json_path.write_text(json.dumps(rows, indent=1) + "\n")
