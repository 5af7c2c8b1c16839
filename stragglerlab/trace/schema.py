"""The one trace schema shared by every producer (workloads) and consumer (analysis).

A trace is a table with one row per traced operation of one worker (one traced
worker per DP x PP cell). Columns are compatible with the OSDI'25 artifact so
that traces move both ways. Times are seconds on one job-wide clock.

    from stragglerlab.trace.schema import TRACE_COLUMNS, OpType
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

SCHEMA_VERSION = "1"


class OpType(str, enum.Enum):
    """Operation types (Megatron-style vocabulary, as in the artifact)."""

    FORWARD_COMPUTE = "forward-compute"
    BACKWARD_COMPUTE = "backward-compute"
    FORWARD_SEND = "forward-send"
    FORWARD_RECV = "forward-recv"
    BACKWARD_SEND = "backward-send"
    BACKWARD_RECV = "backward-recv"
    PARAMS_ALL_GATHER = "params-all-gather"
    GRADS_REDUCE_SCATTER = "grads-reduce-scatter"
    SEPARATE_GRADS_ALL_REDUCE = "separate-grads-all-reduce"
    LAYERNORM_GRADS_ALL_REDUCE = "layernorm-grads-all-reduce"
    EMBEDDING_GRADS_ALL_REDUCE = "embedding-grads-all-reduce"
    OPTIMIZER_CLIP_MAIN_GRAD = "optimizer-clip-main-grad"
    OPTIMIZER = "optimizer"
    GC = "gc"
    # The artifact's category list carries this marker type; traces never hold rows of it.
    FIRST_OP = "first-op"


OPTYPE_VALUES: tuple[str, ...] = tuple(o.value for o in OpType)

COMPUTE_OPS = frozenset({OpType.FORWARD_COMPUTE, OpType.BACKWARD_COMPUTE})
COMPUTE_VALUES: tuple[str, ...] = (OpType.FORWARD_COMPUTE.value, OpType.BACKWARD_COMPUTE.value)
"""The compute ops' trace spellings, forward first: the one op set every measure of a
worker's own compute reads (the detectors' signatures, the device and residual passes)."""
P2P_OPS = frozenset(
    {OpType.FORWARD_SEND, OpType.FORWARD_RECV, OpType.BACKWARD_SEND, OpType.BACKWARD_RECV}
)
DP_COLLECTIVE_OPS = frozenset(
    {OpType.PARAMS_ALL_GATHER, OpType.GRADS_REDUCE_SCATTER, OpType.SEPARATE_GRADS_ALL_REDUCE}
)
# Ops idealized with the median of their type; everything else uses the mean.
COMMUNICATION_OPS = P2P_OPS | DP_COLLECTIVE_OPS | frozenset(
    {
        OpType.LAYERNORM_GRADS_ALL_REDUCE,
        OpType.EMBEDDING_GRADS_ALL_REDUCE,
        OpType.OPTIMIZER_CLIP_MAIN_GRAD,
    }
)


@dataclass(frozen=True)
class Column:
    """One trace column: its name, numpy dtype kind, unit and meaning."""

    name: str
    """Column name in the parquet file."""
    kind: str
    """'int', 'float' or 'category'."""
    unit: str
    """Physical unit, '' when dimensionless."""
    doc: str
    """What the column means."""


TRACE_COLUMNS: tuple[Column, ...] = (
    Column("rank", "int", "", "global rank of the traced worker"),
    Column("dp_rank", "int", "", "data-parallel rank"),
    Column("stage", "int", "", "pipeline-parallel rank"),
    Column("step", "int", "", "training step (iteration) number"),
    Column("optype", "category", "", "operation type, see OpType"),
    Column("start_ts", "float", "s", "start on one clock for the whole job"),
    Column("duration", "float", "s", "duration, >= 0"),
    Column("seq_id", "int", "", "order of this optype on this worker within the step, from 0"),
    Column("mb_id", "int", "", "microbatch id for compute ops, -1 otherwise"),
    Column("mc", "int", "", "model chunk on this stage (virtual pipeline), -1 if n/a"),
    Column("gmc", "int", "", "global model chunk id, -1 if n/a"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in TRACE_COLUMNS)

# Optional extra columns our own workloads write; the analysis reads them where present,
# so the reader checks them as it checks the schema's (a number per row, finite, >= 0).
EXTRA_COLUMNS: tuple[Column, ...] = (
    Column("tp_rank", "int", "", "tensor-parallel rank of the traced worker"),
    Column(
        "seq_len_sq_sum", "float", "tokens^2",
        "sum of squared sequence lengths in the microbatch (NaN on ops without one)"
    ),
    Column("gc_pause_s", "float", "s", "GC pause time inside the op's span"),
)
OPTIONAL_NAN: frozenset[str] = frozenset({"seq_len_sq_sum"})
"""Extra columns whose missing values mean "none for this op" (not a damaged row)."""
