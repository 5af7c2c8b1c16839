"""An unannotated import's op table seen as per-rank, per-step time: the view detectors take
when they need only steps, ranks, the kind of each span (compute or communication) and
its times.

The general op model (`op_model.py`) keeps, per rank and step, a chain of communication
ops, each with the compute segment before it (`gap_s`). This view turns every row into
up to two spans in the trace schema's columns (`rank`, `step`, `start_ts`, `duration`,
`optype`, `dp_rank`, `stage`):

* a compute span, from where the row's gap starts to where it ends (`gap_ends`), with
  `optype` `GENERAL_COMPUTE`;
* a communication span, the op's own start to end, with `optype` `GENERAL_COMM` (none for
  the step-end row).

The two `optype` values are not the Megatron op vocabulary: a detector that compares ops
by name (`forward-compute` on one rank against the same op on its peers) cannot run on
this view, and says so through its `needs` (analysis/detectors/base.py).

    trace = step_view(read_ops(folder / "ops.parquet", again=...))
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.op_model import STEP_END, gap_ends

GENERAL_COMPUTE = "compute"
"""`optype` of a compute segment (host and device work between communication ops)."""
GENERAL_COMM = "communication"
"""`optype` of a communication op of any kind."""
COLUMNS = ("rank", "step", "start_ts", "duration", "optype", "dp_rank", "stage")
"""Columns of the view (trace schema names; times in seconds on the import's clock)."""


def step_view(ops: pd.DataFrame) -> pd.DataFrame:
    """The spans of `ops` (module doc), ordered by rank, step and start."""
    ops = ops.sort_values(["rank", "step", "k"], kind="stable")
    gap = np.maximum(ops["gap_s"].to_numpy(float), 0.0)
    end = gap_ends(ops)
    comm = ops["kind"].to_numpy() != STEP_END
    keep = gap > 0
    cols = {c: ops[c].to_numpy() for c in ("rank", "step", "dp_rank", "stage")}
    compute = pd.DataFrame({**{c: v[keep] for c, v in cols.items()},
                            "start_ts": (end - gap)[keep], "duration": gap[keep],
                            "optype": GENERAL_COMPUTE})
    start = ops["start_s"].to_numpy(float)
    talk = pd.DataFrame({**{c: v[comm] for c, v in cols.items()},
                         "start_ts": start[comm],
                         "duration": np.maximum(ops["end_s"].to_numpy(float) - start, 0.0)[comm],
                         "optype": GENERAL_COMM})
    spans = pd.concat([compute, talk], ignore_index=True)
    spans = spans.sort_values(["rank", "step", "start_ts"], kind="stable", ignore_index=True)
    return spans[list(COLUMNS)]


def layout_of(ops: pd.DataFrame) -> JobMeta:
    """The job meta of an import's op table: its DP x PP layout where the import knew one
    (every row's `dp_rank` and `stage` set), else every rank its own data-parallel worker
    (dp = the largest rank + 1, pp = 1), the coordinates its what-if names ranks by."""
    world = int(ops["rank"].max()) + 1 if len(ops) else 1
    dp, stage = ops["dp_rank"].to_numpy(), ops["stage"].to_numpy()
    if len(ops) and (dp >= 0).all() and (stage >= 0).all():
        return JobMeta(dp_size=int(dp.max()) + 1, pp_size=int(stage.max()) + 1)
    return JobMeta(dp_size=world, pp_size=1)
