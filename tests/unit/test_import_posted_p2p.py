"""Pipeline P2P posted ahead by a helper thread (CPU traces, general op model).

A pipeline engine that posts its sends and receives on a helper thread, as
stragglerlab's own does (workloads/p2p.py), traces each `gloo:send` /
`gloo:recv` on that thread from its post to its completion. Stage 0 posts the
receive of microbatch 0's gradient right after sending microbatch 0's
activations and computes microbatch 1's forward while it is in flight, so the
receive's span holds the next send. Read as one chain in start order, the two
stages' orders contradict each other (stage 0: recv b0 before send f1; stage 1:
recv f1 before send b0) and the replay must release groups early.

Here the receive is posted: the chain goes on from its start, and the first op
that starts after its end waits for it. Pure PP 2 with two microbatches, forward
F and backward B ms per microbatch on each stage (no peer does the same work, so
the ideal is the trace itself): the replay reproduces every step and S = 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.general_sim import schedule, simulate
from stragglerlab.analysis.whatif_general import whatif_general
from stragglerlab.importers.general_async import posted_ahead
from stragglerlab.importers.kineto_general import build_general, load_ranks
from stragglerlab.trace.op_model import previous_points
from tests.unit.general_fixtures import MS, _x, write_docs

F, B, W = 10.0, 10.0, 0.1  # ms: forward, backward, a send's wire time
POSTER = 5


def _p2p(ev: list, kind: str, peer: int, post: float, end: float,
         launch_tid: int = POSTER) -> None:
    """A P2P op on the poster thread: the c10d launch (with the peer as torch records it
    under record_shapes; on `launch_tid`) and the backend's work range from post to
    completion (µs)."""
    launch = "c10d::send" if kind == "send" else "c10d::recv_"
    ev.append(_x(launch, post, 20.0, tid=launch_tid,
                 **{"Concrete Inputs": ["", "", str(peer), ""]}))
    ev.append(_x(f"gloo:{kind}", post + 20.0, end - post - 20.0, cat="user_annotation",
                 tid=POSTER))


def _stage(rank: int, steps=(3, 4, 5)) -> dict:
    """Stage `rank` of a PP 2 job, two microbatches, GPipe order (see the module doc)."""
    ev = []
    step_ms = 3 * F + 3 * B + 4 * W + 1.0  # stage 0's B1 ends at 3F + 3B + 4W + 0.1
    for i, k in enumerate(steps):
        t0 = 1e6 + i * (step_ms + 1.0) * MS

        def at(ms, t0=t0):
            return t0 + ms * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, step_ms * MS, cat="user_annotation"))
        # stage 1: f0 arrives at F + W, f1 at 2F + 2W; it runs F0, F1, B0, sends b0, B1, b1
        f0, f1 = F + W, 2 * F + 2 * W
        b0 = f1 + F + B + W  # stage 1 sends b0 after F1 and B0 (f1 came as F0 ended)
        b1 = b0 + B + W
        if rank == 0:
            ev.append(_x("aten::mm", at(0.0), F * MS))
            _p2p(ev, "send", 1, at(F), at(f0))
            _p2p(ev, "recv", 1, at(f0 + 0.05), at(b0 + 0.05))  # posted ahead: spans F1
            ev.append(_x("aten::mm", at(f0 + 0.05), F * MS))
            _p2p(ev, "send", 1, at(f0 + F + 0.05), at(f1))
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0",
                         at(b0 + 0.1), B * MS))
            _p2p(ev, "recv", 1, at(b0 + 0.1 + B), at(b1 + 0.05))
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0",
                         at(b1 + 0.1), B * MS))
        else:
            _p2p(ev, "recv", 0, at(0.05), at(f0))
            ev.append(_x("aten::mm", at(f0), F * MS))
            _p2p(ev, "recv", 0, at(f0 + F), at(f1 + 0.05))
            ev.append(_x("aten::mm", at(f1 + 0.05), F * MS))
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0",
                         at(f1 + F + 0.05), B * MS - 100.0))
            _p2p(ev, "send", 0, at(b0 - W), at(b0))
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0",
                         at(b0), B * MS))
            _p2p(ev, "send", 0, at(b1 - W), at(b1))
    return {"schemaVersion": 1, "traceEvents": ev, "host_name": "node0",
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}


def _import(tmp_path):
    folder = write_docs(tmp_path, {r: _stage(r) for r in range(2)})
    return build_general(load_ranks(sorted(folder.glob("*.json"))))


def test_a_receive_posted_ahead_is_waited_for_where_the_rank_needs_it(tmp_path):
    ops = _import(tmp_path).ops
    recv_b0 = ops[(ops["rank"] == 0) & (ops["k"] == 1)]
    assert (recv_b0["kind"] == "recv").all() and recv_b0["async"].all()
    # The first op of stage 0 that starts after recv b0 ends is recv b1 (k 3): its gap is
    # backward B0, measured from recv b0's end, not from send f1's.
    assert (recv_b0["wait_k"] == 3).all()
    recv_b1 = ops[(ops["rank"] == 0) & (ops["k"] == 3)]
    # (from recv b0's end, b0 + 0.05, to recv b1's launch, b0 + 0.1 + B: the op starts
    # where the program called it, its work range 20 us later)
    assert recv_b1["gap_s"].to_numpy() == pytest.approx((B + 0.05) / 1e3, abs=2e-6)
    # send f1's gap is forward F1, from recv b0's post
    send_f1 = ops[(ops["rank"] == 0) & (ops["k"] == 2)]
    assert send_f1["gap_s"].to_numpy() == pytest.approx(F / 1e3, abs=2e-6)
    # stage 1 posts nothing ahead: each of its ops ends before its next one starts
    assert not (ops.loc[ops["rank"] == 1, "wait_k"] >= 0).any()


def test_the_replay_of_posted_p2p_needs_no_release_and_reproduces_the_trace(tmp_path):
    ops = _import(tmp_path).ops
    wi = whatif_general(ops)
    assert wi.released_groups == 0
    assert abs(wi.discrepancy) < 1e-3
    assert wi.S == pytest.approx(1.0, abs=1e-3)
    # Without the posted rows (every op waited for where it stands) the stages' orders
    # contradict each other: the replay releases groups and comes out short.
    blocking = ops.assign(**{"async": False, "wait_k": -1})
    assert schedule(blocking).released > 0


def test_posted_ahead_pools_the_overlap_over_the_same_work():
    # two ranks doing the same work (role 0): rank 0's recv spans its next op, rank 1's
    # ended before it (the same program posted it; its peer was just quicker): both are
    # posted and waited for at one position, the latest either shows (rank 0's op ran
    # past the start of k 1, so the program did not need it there); another role is not
    rows = []
    for r, role, over in ((0, 0, True), (1, 0, False), (2, 1, False)):
        rows += [(r, role, 0, "recv", 0.0, 5.0 if over else 1.5), (r, role, 1, "send", 2.0, 2.5),
                 (r, role, 2, "send", 6.0, 6.5), (r, role, 3, "step-end", 9.0, 9.0)]
    ops = pd.DataFrame(rows, columns=["rank", "role", "k", "kind", "start", "end"]).assign(
        step=1, group=0)
    posted, wait = posted_ahead(ops, np.zeros(len(ops), bool))
    assert posted.tolist() == [True, False, False, False] * 2 + [False] * 4
    assert wait[::4].tolist() == [2, 2, -1]
    # an async row (by what its launching thread did) is waited for the same way
    asy = np.zeros(len(ops), bool)
    asy[9] = True
    posted, wait = posted_ahead(ops, asy)
    assert posted[9] and wait[9] == 2
    # a P2P op with no traced peer (local) keeps its traced span: not posted
    posted, _ = posted_ahead(ops.assign(group=-1), asy)
    assert not posted.any()


def test_previous_points_wait_for_a_posted_row_at_its_wait_k_only():
    ops = pd.DataFrame({
        "rank": 0, "step": 1, "k": [0, 1, 2, 3],
        "kind": ["recv", "send", "recv", "step-end"],
        "start_s": [1.0, 2.0, 6.0, 9.0], "end_s": [5.0, 3.0, 8.0, 9.0],
        "async": [True, False, False, False], "wait_k": [2, -1, -1, -1]})
    prev = previous_points(ops)
    # after the posted row: its start; row 2 also waits for its end (5 > send's 3); the
    # step end waits only for its own predecessor (a posted row is not awaited there)
    assert np.isnan(prev[0]) and prev[1:].tolist() == [1.0, 5.0, 8.0]


def test_a_posted_row_waited_for_at_the_step_end_ends_the_step():
    ops = pd.DataFrame({
        "rank": [0, 0, 1, 1], "step": 1, "k": [0, 1, 0, 1],
        "kind": ["recv", "step-end", "send", "step-end"], "group": [0, -1, 0, -1],
        "start_s": [0.0, 4.0, 3.0, 3.5], "end_s": [3.5, 4.0, 3.5, 3.5],
        "async": [True, False, False, False], "wait_k": [1, -1, -1, -1]})
    gap = np.array([[0.0], [0.5], [3.0], [0.0]])
    transfer = np.array([[0.5], [0.0], [0.5], [0.0]])
    # rank 0 posts at 0 and would end at 0.5; its recv runs 3.0-3.5 with the send, and
    # its step end waits for it: 3.5 + 0.5
    assert simulate(schedule(ops), gap, transfer)[0, 0] == pytest.approx(4.0)


def test_the_import_says_how_many_p2p_ops_it_read_as_posted(tmp_path, capsys):
    from stragglerlab.cli import main

    folder = write_docs(tmp_path / "traces", {r: _stage(r) for r in range(2)})
    assert main(["import", "kineto", "--traces", str(folder), "--out",
                 str(tmp_path / "out"), "--quiet"]) == 0
    # stage 0's receive of microbatch 0's gradient, in each of the three steps
    assert ", 3 P2P posted ahead" in capsys.readouterr().out


def _one_f_one_b(rank: int, steps=(3, 4, 5)) -> dict:
    """A PP 2 job, two microbatches, 1F1B: stage 1 posts the receive of microbatch 1's
    activations as its forward F0 ends and computes backward B0 while they arrive (stage 0's
    F1 is slower, FS1 ms); it waits for them only before F1 (times in ms from the step's
    start)."""
    ev, FS1 = [], 15.0
    for i, k in enumerate(steps):
        t0 = 1e6 + i * 70.0 * MS

        def at(ms, t0=t0):
            return t0 + ms * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, 61.0 * MS, cat="user_annotation"))
        f1 = 10.1 + FS1 + W  # stage 0's send f1 ends
        if rank == 0:
            ev.append(_x("aten::mm", at(0.0), F * MS))
            _p2p(ev, "send", 1, at(F), at(F + W))
            ev.append(_x("aten::mm", at(F + W), FS1 * MS))
            _p2p(ev, "send", 1, at(f1 - W), at(f1))
            _p2p(ev, "recv", 1, at(f1), at(30.3))  # blocking: the rank waits for b0
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0", at(30.3), B * MS))
            _p2p(ev, "recv", 1, at(40.3), at(50.4))
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0", at(50.4), B * MS))
        else:
            _p2p(ev, "recv", 0, at(0.05), at(F + W))
            ev.append(_x("aten::mm", at(F + W), F * MS))
            # posted from the main thread (its work range on the backend's): arrives while
            # the main thread runs B0
            _p2p(ev, "recv", 0, at(20.15), at(f1), launch_tid=1)
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0", at(20.2),
                         B * MS))
            _p2p(ev, "send", 0, at(30.2), at(30.3))
            ev.append(_x("aten::mm", at(30.3), F * MS))  # F1 needs f1
            ev.append(_x("autograd::engine::evaluate_function: MmBackward0", at(40.3),
                         B * MS))
            _p2p(ev, "send", 0, at(50.3), at(50.4))
    return {"schemaVersion": 1, "traceEvents": ev, "host_name": "node0",
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}


def test_a_gap_that_computed_through_a_posted_receive_did_not_wait_for_it(tmp_path):
    """Stage 1's receive of f1 ends while its backward B0 runs: B0 did not need it, F1
    (the gap after the send of b0) does. Waited for at the send of b0, B0 would start only
    when stage 0's slower F1 ended, and stage 0's forward would lie on stage 1's path."""
    folder = write_docs(tmp_path, {r: _one_f_one_b(r) for r in range(2)})
    ops = build_general(load_ranks(sorted(folder.glob("*.json")))).ops
    s1 = ops[ops["rank"] == 1].set_index(["step", "k"])
    recv_f1 = s1.xs(1, level="k")
    assert (recv_f1["kind"] == "recv").all() and (recv_f1["wait_k"] == 3).all()
    # the send of b0's gap is all of B0: from the receive's work range (20.17 ms, launched
    # 20 us before on another thread) to the send (30.2 ms), not from f1's arrival (25.2)
    assert s1.xs(2, level="k")["gap_s"].to_numpy() == pytest.approx(10.03e-3, abs=2e-6)
    # the send of b1's gap is F1 and B1, from the send of b0's end (f1 had arrived)
    assert s1.xs(3, level="k")["gap_s"].to_numpy() == pytest.approx(2 * F / 1e3, abs=2e-6)
    # stage 0 idled in its blocking receive of b0: nothing there moves
    assert not (ops.loc[ops["rank"] == 0, "wait_k"] >= 0).any()
    wi = whatif_general(ops)
    assert wi.released_groups == 0 and abs(wi.discrepancy) < 1e-3


def test_posted_ahead_moves_the_wait_past_a_gap_that_computed_through():
    # rank 0 computes (backward activity) through its posted recv's end: the op after the
    # send waits; rank 1 (another role) idles before its recv's end: the send waits
    rows = []
    for r in (0, 1):
        rows += [(r, r, 0, "recv", 0.0, 3.0), (r, r, 1, "send", 5.0, 5.5),
                 (r, r, 2, "send", 8.0, 8.5), (r, r, 3, "step-end", 9.0, 9.0)]
    ops = pd.DataFrame(rows, columns=["rank", "role", "k", "kind", "start", "end"]).assign(
        step=1, group=0)
    asy = np.zeros(len(ops), bool)
    asy[[0, 4]] = True
    act = {0: np.array([[0.2, 4.9]]), 1: np.array([[2.5, 4.9]])}  # rank 1: 0.5 of 3.0 busy
    _, wait = posted_ahead(ops, asy, act)
    assert wait[[0, 4]].tolist() == [2, 1]
    _, wait = posted_ahead(ops, asy)  # no activity traced: the first op after the end
    assert wait[[0, 4]].tolist() == [1, 1]
