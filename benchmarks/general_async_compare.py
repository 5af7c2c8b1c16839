"""An unannotated import read with and without its async collectives (docs/torch-workloads.md).

Re-reads an `import kineto` folder's ops.parquet twice: as written (a rank goes on from
an async op's launch: stragglerlab.trace.op_model) and with every op waited for (one chain per
rank from each op's end, the model before async ops), and prints S and the simulation
discrepancy of each, for the mean and the median compute ideal.

    .venv/bin/python benchmarks/general_async_compare.py RUN/import [RUN2/import ...]
"""

from __future__ import annotations

import sys

import pandas as pd

from stragglerlab.analysis.whatif_general import whatif_general
from stragglerlab.trace.op_model import previous_points


def waited_for(ops: pd.DataFrame) -> pd.DataFrame:
    """ops with no op async or queued, every gap measured from the previous op's end."""
    old = ops.sort_values(["rank", "step", "k"], ignore_index=True).assign(
        **{"async": False, "serial": False})
    old["ready_s"] = old["start_s"]
    later = (old.groupby(["rank", "step"])["k"].transform("min") != old["k"]).to_numpy()
    prev = previous_points(old)
    old.loc[later, "gap_s"] = old["start_s"].to_numpy()[later] - prev[later]
    return old


def main(folders: list[str]) -> int:
    for folder in folders:
        ops = pd.read_parquet(f"{folder}/ops.parquet")
        n_async = int(ops["async"].sum()) if "async" in ops else 0
        for ideal in ("mean", "median"):
            a, b = whatif_general(ops, ideal), whatif_general(waited_for(ops), ideal)
            print(f"{folder}: {ideal}: {n_async} async ops: S {a.S:.3f} (discrepancy "
                  f"{a.discrepancy:+.3f}); every op waited for: S {b.S:.3f} (discrepancy "
                  f"{b.discrepancy:+.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
