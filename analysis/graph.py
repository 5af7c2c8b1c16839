"""Dependency model of one training step (design.md §4.1-4.2 and Appendix A).

Ops are named by (optype, seq_id, stage); the graph is built once from DP rank 0
of the first traced step and applies to every DP rank and every step. It holds

* `deps[n]`: the nodes whose end op n waits for (stream order + cross-stream rules);
* `groups`: comm groups whose members finish together (a P2P pair, one DP
  collective synchronized across DP ranks, the embedding all-reduce of the
  first and last stage, clip-main-grad over every stage); compute-like ops are
  groups of one;
* `order`: the groups in topological order (a cycle is an InputError).

    graph = build_graph(step_rows, meta, where="trace.parquet")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.analysis.p2p import match_stream
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import COMMUNICATION_OPS, DP_COLLECTIVE_OPS, OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_table import TraceTable
from stragglerlab.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

Op = OpType  # short alias for the many rules below


@dataclass(frozen=True)
class Group:
    """Ops that end together: at the group's latest start plus each one's transfer duration."""

    members: tuple[int, ...]
    """Node indices."""
    is_comm: bool
    """False for compute-like ops (end = start + duration)."""
    dp_sync: bool
    """True when the group also spans every DP rank (DP collectives, clip-main-grad)."""


@dataclass
class DepGraph:
    """The per-step dependency graph shared by all DP ranks and steps."""

    optype: np.ndarray
    """Per node: optype string."""
    seq_id: np.ndarray
    """Per node: seq_id."""
    stage: np.ndarray
    """Per node: pipeline stage."""
    mb_id: np.ndarray
    """Per node: microbatch id (-1 for non-compute ops)."""
    deps: list[np.ndarray]
    """Per node: indices of the nodes it depends on."""
    groups: list[Group]
    """Comm groups and singleton compute-like ops; every node is in exactly one."""
    order: list[int] = field(default_factory=list)
    """Group indices in topological order."""
    noop: np.ndarray | None = None
    """Per node: True for a P2P record without a peer."""

    @property
    def step_end_nodes(self) -> np.ndarray:
        """Nodes whose end ends a simulated step: the optimizer ops (empty if there are none)."""
        return np.flatnonzero(self.optype == "optimizer")

    @property
    def n_nodes(self) -> int:
        """Number of ops per (step, DP rank)."""
        return len(self.optype)

    def node_index(self) -> pd.MultiIndex:
        """(optype, seq_id, stage) of every node, in node order."""
        import pandas as pd  # for callers that index frames by node

        return pd.MultiIndex.from_arrays(
            [self.optype, self.seq_id, self.stage], names=["optype", "seq_id", "stage"]
        )


class _OpsOfType:
    """Node ids of one stage's ops of a type, in stream order: `of(OpType.GC)`."""

    def __init__(self, nodes: np.ndarray, types: np.ndarray) -> None:
        """nodes: the stage's node ids, ascending; types: their optype strings."""
        self._by_type = {t: nodes[types == t] for t in np.unique(types)}

    def __call__(self, t: OpType) -> np.ndarray:
        return self._by_type.get(t.value, np.zeros(0, dtype=np.int64))


_NAME_RANK = np.argsort(np.argsort(np.array(OPTYPE_VALUES)))
"""Each op-type code's place in the names' text order: the stream order's last key."""


class _Builder:
    """Collects edges and groups while rules are applied."""

    def __init__(self, ops: dict[str, np.ndarray]) -> None:
        # The columns the rules read, as arrays by node id (stream order).
        self.optype = ops["optype"]
        self.start = ops["start_ts"]
        self.end = ops["end"]
        self.gmc = ops["gmc"]
        self.mc = ops["mc"]
        self.edges: list[tuple[int, int]] = []  # (dependency, dependant)
        self.groups: list[Group] = []

    def edge(self, before: int, after: int) -> None:
        self.edges.append((int(before), int(after)))

    def chain(self, nodes) -> None:
        nodes = list(nodes)
        for a, b in zip(nodes[:-1], nodes[1:]):
            self.edge(a, b)


def build_graph(step_rows: pd.DataFrame | TraceTable, meta: JobMeta, where: str) -> DepGraph:
    """Build the dependency graph from the rows of one step of DP rank 0.

    step_rows needs columns optype, seq_id, stage, start_ts, duration, mb_id, mc, gmc.
    """
    rows = TraceTable.of(step_rows)
    # The node arrays index and multiply: int64 whatever width the trace was read at.
    ints = {c: rows[c].astype(np.int64) for c in ("seq_id", "stage", "mb_id", "mc", "gmc")}
    # Stream order within each stage: (start_ts, seq_id, optype), a stable sort (no two
    # rows of one step and worker share all four: validated).
    order = np.lexsort((_NAME_RANK[rows.optype], ints["seq_id"], rows["start_ts"],
                        ints["stage"]))
    ops = {c: v[order] for c, v in ints.items()}
    ops["optype"] = rows.optype_names()[order]
    ops["start_ts"] = rows["start_ts"][order].astype(np.float64)
    ops["end"] = ops["start_ts"] + rows["duration"][order].astype(np.float64)
    n = len(order)
    b = _Builder(ops)
    noop = np.zeros(n, dtype=bool)
    valid_p2p: dict[tuple[str, int], np.ndarray] = {}
    has_dp = meta.dp_size * meta.dsp_size > 1
    overlapped_dp = (ops["optype"] == Op.SEPARATE_GRADS_ALL_REDUCE.value).any()
    pp = meta.pp_size

    stages = ops["stage"]
    for stage in np.unique(stages):
        s_nodes = np.flatnonzero(stages == stage)  # the stage's ops in stream order
        s_types = b.optype[s_nodes]
        of = _OpsOfType(s_nodes, s_types)

        is_compute = np.isin(s_types, [Op.FORWARD_COMPUTE.value, Op.BACKWARD_COMPUTE.value])
        compute = s_nodes[is_compute]
        b.chain(compute)
        compute_types = b.optype[compute]
        first_bwd_pos = np.flatnonzero(compute_types == Op.BACKWARD_COMPUTE.value)
        anchor = None  # the compute two places before the stage's first backward
        if len(first_bwd_pos) and first_bwd_pos[0] >= 2:
            anchor = compute[first_bwd_pos[0] - 2]

        for forward in (True, False):
            comp = of(Op.FORWARD_COMPUTE if forward else Op.BACKWARD_COMPUTE)
            for is_recv in (True, False):
                if forward:
                    t = Op.FORWARD_RECV if is_recv else Op.FORWARD_SEND
                else:
                    t = Op.BACKWARD_RECV if is_recv else Op.BACKWARD_SEND
                stream = of(t)
                b.chain(stream)
                match = match_stream(
                    is_recv=is_recv,
                    op_start=b.start[stream],
                    op_end=b.end[stream],
                    compute_start=b.start[comp],
                    compute_end=b.end[comp],
                    compute_gmc=b.gmc[comp],
                    forward=forward,
                    stage=int(stage),
                    pp_size=pp,
                    vpp_size=meta.vpp_size,
                    where=where,
                )
                noop[stream[~match.valid]] = True
                valid_p2p[(t.value, int(stage))] = stream[match.valid]
                for node, k in zip(stream[match.valid], match.compute_index[match.valid]):
                    if is_recv:
                        if k >= 1:
                            b.edge(comp[k - 1], node)
                        b.edge(node, comp[k])
                    else:
                        b.edge(comp[k], node)
                if not forward and anchor is not None and match.valid.any():
                    b.edge(anchor, stream[match.valid][0])

        _dp_and_tail_rules(b, of, compute, has_dp, bool(overlapped_dp))

    _p2p_groups(b, valid_p2p, noop, pp, where)
    _collective_groups(b, ops["seq_id"], noop, has_dp)
    deps = _deps_from_edges(n, b.edges)
    graph = DepGraph(
        optype=ops["optype"],
        seq_id=ops["seq_id"],
        stage=ops["stage"],
        mb_id=ops["mb_id"],
        deps=deps,
        groups=b.groups,
        noop=noop,
    )
    graph.order = topological_order(graph, where)
    return graph


def _dp_and_tail_rules(b: _Builder, of, compute, has_dp: bool, overlapped: bool) -> None:
    """DP chain, params-all-gather gating and the step tail of one stage."""
    mc_of = b.mc
    gather, scatter = of(Op.PARAMS_ALL_GATHER), of(Op.GRADS_REDUCE_SCATTER)
    if has_dp:
        dp_chain = np.sort(np.concatenate([gather, scatter]))  # node ids follow stream order
        b.chain(dp_chain)
        fwd = of(Op.FORWARD_COMPUTE)
        for mc in np.unique(mc_of[gather]):
            chunk_gathers = gather[mc_of[gather] == mc]
            chunk_fwd = fwd[mc_of[fwd] == mc]
            if len(chunk_fwd):
                b.edge(chunk_gathers[-1], chunk_fwd[0])
    gc = of(Op.GC)
    if len(gc) and len(compute):
        last_compute = compute[np.argmax(b.end[compute])]
        b.edge(last_compute, gc[0])
    b.chain(gc)
    head = list(gc[-1:])
    if has_dp and overlapped:
        bwd = of(Op.BACKWARD_COMPUTE)
        for mc in np.unique(mc_of[scatter]):
            chunk_bwd = bwd[mc_of[bwd] == mc]
            if len(chunk_bwd):
                for node in scatter[mc_of[scatter] == mc]:
                    b.edge(chunk_bwd[-1], node)
        head = list(scatter[-1:]) + head
    tail = [of(Op.LAYERNORM_GRADS_ALL_REDUCE), of(Op.EMBEDDING_GRADS_ALL_REDUCE)]
    if has_dp:
        tail.append(of(Op.SEPARATE_GRADS_ALL_REDUCE) if overlapped else scatter)
    tail += [of(Op.OPTIMIZER_CLIP_MAIN_GRAD), of(Op.OPTIMIZER)]
    for part in tail:
        if not len(part):
            continue
        for h in head:
            b.edge(h, part[0])
        b.chain(part)
        head = [part[-1]]


def _p2p_groups(b: _Builder, valid: dict, noop: np.ndarray, pp: int, where: str) -> None:
    """Pair the i-th valid send of stage s with the i-th valid recv of the peer stage."""
    for send_t, recv_t, step in ((Op.FORWARD_SEND, Op.FORWARD_RECV, 1),
                                 (Op.BACKWARD_SEND, Op.BACKWARD_RECV, -1)):
        for s in range(pp):
            sends = valid.get((send_t.value, s), np.zeros(0, dtype=np.int64))
            recvs = valid.get((recv_t.value, (s + step) % pp), np.zeros(0, dtype=np.int64))
            if len(sends) != len(recvs):
                raise InputError(
                    f"{where}: stage {s} has {len(sends)} valid {send_t.value} ops but stage "
                    f"{(s + step) % pp} has {len(recvs)} valid {recv_t.value} ops; every send "
                    "needs its matching recv on the peer stage."
                )
            for a, r in zip(sends, recvs):
                b.groups.append(Group((int(a), int(r)), is_comm=True, dp_sync=False))
    for node in np.flatnonzero(noop):
        b.groups.append(Group((int(node),), is_comm=True, dp_sync=False))


def _collective_groups(b: _Builder, seq_id: np.ndarray, noop: np.ndarray,
                       has_dp: bool) -> None:
    """DP collectives, embedding and clip groups; every other op is a group of one."""
    in_group = np.zeros(len(seq_id), dtype=bool)
    for g in b.groups:
        in_group[list(g.members)] = True
    optype = b.optype
    dp_ops = {t.value for t in DP_COLLECTIVE_OPS}
    comm = {t.value for t in COMMUNICATION_OPS} - {Op.LAYERNORM_GRADS_ALL_REDUCE.value}
    # The embedding and clip ops of a seq_id form one group each, in the order their
    # (optype, seq_id) first appears (as an unsorted groupby lists them); a few rows, so
    # a dict beats a groupby over every op.
    spanning = {Op.EMBEDDING_GRADS_ALL_REDUCE.value: False, Op.OPTIMIZER_CLIP_MAIN_GRAD.value: True}
    members: dict[tuple, list[int]] = {}
    for node in np.flatnonzero(np.isin(optype, list(spanning))):
        members.setdefault((optype[node], seq_id[node]), []).append(int(node))
    for (t, _seq), nodes in members.items():
        b.groups.append(Group(tuple(nodes), True, spanning[t]))
        in_group[nodes] = True
    for node in np.flatnonzero(~in_group):
        t = optype[node]
        if t in dp_ops:
            b.groups.append(Group((int(node),), True, has_dp))
        else:
            b.groups.append(Group((int(node),), t in comm, False))


def _deps_from_edges(n: int, edges: list[tuple[int, int]]) -> list[np.ndarray]:
    if not edges:
        return [np.zeros(0, dtype=np.int64) for _ in range(n)]
    arr = np.unique(np.asarray(edges, dtype=np.int64), axis=0)
    arr = arr[arr[:, 0] != arr[:, 1]]
    order = np.argsort(arr[:, 1], kind="stable")
    arr = arr[order]
    splits = np.searchsorted(arr[:, 1], np.arange(n + 1))
    return [arr[splits[i]:splits[i + 1], 0] for i in range(n)]


def topological_order(graph: DepGraph, where: str) -> list[int]:
    """Kahn's algorithm over groups; raises InputError naming the ops on a cycle."""
    group_of = np.empty(graph.n_nodes, dtype=np.int64)
    for gi, g in enumerate(graph.groups):
        group_of[list(g.members)] = gi
    n_groups = len(graph.groups)
    preds: list[set[int]] = [set() for _ in range(n_groups)]
    for node, d in enumerate(graph.deps):
        g = group_of[node]
        preds[g].update(int(x) for x in group_of[d] if x != g)
    succs: list[list[int]] = [[] for _ in range(n_groups)]
    for g, ps in enumerate(preds):
        for p in ps:
            succs[p].append(g)
    indeg = [len(p) for p in preds]
    ready = [g for g in range(n_groups) if indeg[g] == 0]
    order: list[int] = []
    while ready:
        g = ready.pop()
        order.append(g)
        for s in succs[g]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(order) < n_groups:
        stuck = [g for g in range(n_groups) if indeg[g] > 0][:4]
        names = [
            f"({graph.optype[m]}, seq_id {graph.seq_id[m]}, stage {graph.stage[m]})"
            for g in stuck for m in graph.groups[g].members[:1]
        ]
        raise InputError(
            f"{where}: the ops' dependencies form a cycle involving {', '.join(names)}; "
            "check the ops' start times and seq_ids in the first step of DP rank 0."
        )
    return order
