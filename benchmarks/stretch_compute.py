"""A recorded pure-DP run as a loaded host would have run it: every compute op K times as
long, every later op on its rank shifted by the time added before it, communication as
recorded. A host shared with other jobs took 4-7 s of compute a step where a quiet one
takes 1.2 s; a throttled ring's added time is then a smaller share of the step, which is
what the job-wide rule's step ratio and collective-kind share are read against
(docs/detectors.md, "Across ranks and over time"). Pure DP only: a pipeline's sends and
receives would no longer meet in time.

    python benchmarks/stretch_compute.py --run R/shared-ring-dp4/0 --out X/dp4/0 --factor 5
    stragglerlab whatif --run X/dp4/0 && stragglerlab detect --run X/dp4/0
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.run.run_folder import RunFolder
from stragglerlab.trace.trace_io import write_trace

COMPUTE = ("forward-compute", "backward-compute")


def stretched(trace: pd.DataFrame, k: float) -> pd.DataFrame:
    """Every compute op k times as long; later ops on its rank start that much later."""
    t = trace.sort_values(["rank", "start_ts"]).copy()
    comp = t["optype"].astype(str).isin(COMPUTE).to_numpy()
    extra = pd.Series(np.where(comp, (k - 1) * t["duration"].to_numpy(float), 0.0),
                      index=t.index)
    t["start_ts"] = t["start_ts"] + extra.groupby(t["rank"]).cumsum() - extra
    t.loc[comp, "duration"] = t.loc[comp, "duration"] * k
    return t.sort_index()


def main(argv: list[str] | None = None) -> int:
    """CLI."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a recorded pure-DP run folder")
    p.add_argument("--out", required=True, help="the stretched run folder to write")
    p.add_argument("--factor", type=float, default=5.0, help="compute slowdown (default 5)")
    a = p.parse_args(argv)
    src, dst = Path(a.run), Path(a.out)
    folder = RunFolder(path=src)
    if folder.meta.pp_size != 1:
        raise SystemExit(f"{src}: pipeline stages; only a pure-DP run can be stretched")
    if a.factor < 1:
        raise SystemExit(f"--factor {a.factor}: a loaded host slows compute, give 1 or more")
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("meta.yaml", "faults.json", "run.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)
    write_trace(stretched(folder.trace(), a.factor), folder.meta, dst / "trace.parquet")
    print(f"{dst}: compute x{a.factor:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
