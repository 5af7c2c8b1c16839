"""A gloo CPU trace of a DP x PP pipeline: P2P peers and collective groups from pg_config.

torch.distributed.pipelining over per-pipeline process groups: rank r's
`c10d::send(tensors, pg, dstRank, tag)` names dstRank within the pipeline's
group, which the trace does not name (record_shapes=True keeps it at all), and
each stage's DP all-reduce is a `gloo:all_reduce` with no group.
`distributedInfo.pg_config` lists the groups each rank is in:
stragglerlab.importers.p2p_peers resolves the global peer (the import then pairs
sends with recvs), stragglerlab.importers.collective_groups the all-reduce's group.
"""

from __future__ import annotations

import pandas as pd
import pytest

from stragglerlab.importers.collective_groups import assign_pg
from stragglerlab.importers.kineto_general import build_general, load_ranks
from stragglerlab.importers.p2p_peers import resolve_group_peers
from tests.unit.general_fixtures import MS, _x, write_docs

DP, PP = 2, 2


def _groups(rank: int) -> list[dict]:
    """pg_config as torch writes it: the default group, then the rank's pipeline and DP
    groups (rank = stage * DP + dp_rank)."""
    stage, d = divmod(rank, DP)
    pipe = [s * DP + d for s in range(PP)]
    dp = [stage * DP + x for x in range(DP)]
    return [{"pg_name": "0", "ranks": list(range(DP * PP))},
            {"pg_name": str(1 + d), "ranks": pipe},
            {"pg_name": str(3 + stage), "ranks": dp}]


def _frame(rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    return pd.DataFrame([{"rank": r, "kind": k, "group_peer": g, "peer": -1}
                         for r, k, g in rows])


def test_group_rank_resolves_to_the_one_peer_that_answers():
    # Pipeline of DP rank 1 is ranks 1 -> 3; each names the other as group rank 1 / 0.
    # Rank 1's dstRank 1 could be rank 3 (its pipeline group) or rank 1 (default and DP
    # group: itself, dropped): one candidate. Rank 3's srcRank 0 could be rank 0 (default
    # group), rank 1 (pipeline group) or rank 2 (DP group): only rank 1 sends to it.
    c = _frame([(1, "send", 1), (3, "recv", 0), (0, "send", 1), (2, "recv", 0)])
    notes: list[str] = []
    peer = resolve_group_peers(c, {r: _groups(r) for r in range(4)}, notes)
    assert peer.tolist() == [3, 1, 2, 0]
    assert notes == []


def test_without_pg_config_a_group_rank_is_the_global_rank():
    c = _frame([(0, "send", 1), (1, "recv", 0), (0, "all_reduce", -1)])
    assert resolve_group_peers(c, {0: [], 1: []}, []).tolist() == [1, 0, -1]


def test_an_unsettled_peer_stays_local_and_is_noted():
    # Both candidates answer (ranks 1 and 2 each receive from a group rank naming 0): the
    # trace cannot tell which group the send used.
    c = _frame([(0, "send", 1), (1, "recv", 0), (2, "recv", 0)])
    notes: list[str] = []
    groups = {0: [{"ranks": [0, 1]}, {"ranks": [0, 2]}], 1: [{"ranks": [0, 1]}],
              2: [{"ranks": [0, 2]}]}
    peer = resolve_group_peers(c, groups, notes)
    assert peer.tolist() == [-1, 0, 0]
    assert "1 send/recv op(s)" in notes[0]


def test_a_p2p_op_that_names_no_peer_stays_local_and_says_why():
    # A trace trimmed to its gloo:send / gloo:recv ranges (examples/kineto-dp2-pp2: 96 of
    # 144 ops) keeps no c10d::send launch, so no group rank either: nothing to resolve.
    c = _frame([(0, "send", -1), (2, "recv", -1), (0, "send", 2), (2, "recv", 0),
                (0, "all_reduce", -1)])
    notes: list[str] = []
    peer = resolve_group_peers(c, {0: [], 2: []}, notes)
    assert peer.tolist() == [-1, -1, 2, 0, -1]
    assert len(notes) == 1 and notes[0].startswith("2 send/recv op(s) name no peer")
    assert "record_shapes=True" in notes[0]


def _pipeline_doc(rank: int, steps=(3, 4), all_reduce: bool = False) -> dict:
    """One rank of a 2-stage pipeline step as torch 2.13's gloo traces it with
    record_shapes: stage 0 sends an activation at 10 ms, stage 1 receives it; the
    launch (`c10d::send`, main thread) names the peer's group rank, the work
    (`gloo:send`, a gloo thread) does not."""
    stage, _d = divmod(rank, DP)
    ev = []
    for i, k in enumerate(steps):
        t0 = 1e6 + i * 40 * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, 30 * MS, cat="user_annotation"))
        if stage == 0:
            ev.append(_x("c10d::send", t0 + 10 * MS, 20.0, **{"Concrete Inputs":
                                                             ["", "", "1", "0"]}))
            ev.append(_x("gloo:send", t0 + 10 * MS + 20, 1 * MS, tid=9))
        else:
            ev.append(_x("c10d::recv_", t0 + 1 * MS, 20.0, **{"Concrete Inputs":
                                                             ["", "", "0", "0"]}))
            ev.append(_x("gloo:recv", t0 + 1 * MS + 20, 10 * MS, tid=9))
        if all_reduce:  # each stage's DP all-reduce: stage 1 first, then stage 0
            at = 25 if stage == 0 else 15
            ev.append(_x("c10d::allreduce_", t0 + at * MS, 20.0))
            ev.append(_x("gloo:all_reduce", t0 + at * MS + 20, 2 * MS, tid=9))
    info = {"backend": "gloo", "rank": rank, "world_size": DP * PP,
            "pg_config": _groups(rank)}
    return {"traceEvents": ev, "host_name": "vm", "distributedInfo": info}


def test_gloo_pipeline_sends_pair_with_their_recvs(tmp_path):
    folder = write_docs(tmp_path, {r: _pipeline_doc(r) for r in range(DP * PP)})
    res = build_general(load_ranks(sorted(folder.glob("*.json*"))))
    p2p = res.ops[res.ops["kind"].isin(["send", "recv"])]
    assert len(p2p) == 8 and (p2p["group"] >= 0).all()
    pairs = p2p.groupby("group")["rank"].apply(lambda r: tuple(sorted(r))).tolist()
    assert sorted(pairs) == [(0, 2), (0, 2), (1, 3), (1, 3)]
    assert p2p.set_index("rank")["peer"].groupby(level=0).first().to_dict() == \
        {0: 2, 1: 3, 2: 0, 3: 1}


def _recv_at(docs: dict[int, dict], at_ms: float, dur_ms: float) -> dict[int, dict]:
    """Stage 1's receives moved to `at_ms` into each step, `dur_ms` long."""
    for r, d in docs.items():
        if r >= DP:
            t0s = [e["ts"] for e in d["traceEvents"] if e["name"].startswith("ProfilerStep")]
            for e, t0 in zip((e for e in d["traceEvents"] if e["name"] == "gloo:recv"), t0s,
                             strict=True):
                e["ts"], e["dur"] = t0 + at_ms * MS, dur_ms * MS
    return docs


def test_a_send_that_did_not_wait_for_its_receive_pairs_and_is_async(tmp_path):
    # gloo writes the activation into the peer's socket: stage 0's send ends at 11 ms,
    # stage 1 posts its receive at 12 ms and finds the data there.
    docs = _recv_at({r: _pipeline_doc(r) for r in range(DP * PP)}, 12.0, 0.5)
    res = build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json*"))))
    p2p = res.ops[res.ops["kind"].isin(["send", "recv"])]
    assert len(p2p) == 8 and (p2p["group"] >= 0).all()
    assert p2p.groupby("kind")["async"].all().to_dict() == {"recv": False, "send": True}
    assert (p2p["wait_k"] == -1).all()  # only the step end waits for the send


def test_a_receive_that_ended_before_its_send_began_stays_local(tmp_path):
    docs = _recv_at({r: _pipeline_doc(r) for r in range(DP * PP)}, 2.0, 5.0)  # ends at 7
    res = build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json*"))))
    p2p = res.ops[res.ops["kind"].isin(["send", "recv"])]
    assert len(p2p) == 8 and (p2p["group"] < 0).all() and not p2p["async"].any()


def test_a_send_that_waited_in_its_launch_starts_at_the_launch(tmp_path):
    # Stage 0's blocking send waits 5 ms inside its `c10d::send` launch, on the thread that
    # then opens the `gloo:send` range; stage 1's receive (1-11 ms) completed meanwhile.
    docs = {r: _pipeline_doc(r) for r in range(DP * PP)}
    for r in range(DP):
        for e in docs[r]["traceEvents"]:
            if e["name"] == "c10d::send":
                e["tid"], e["dur"] = 9, 5 * MS
            elif e["name"] == "gloo:send":
                e["ts"], e["dur"] = e["ts"] + 5 * MS, 0.1 * MS
    res = _load(tmp_path, docs)
    p2p = res.ops[res.ops["kind"].isin(["send", "recv"])]
    assert len(p2p) == 8 and (p2p["group"] >= 0).all()
    sends = p2p[p2p["kind"] == "send"]
    recvs = p2p[p2p["kind"] == "recv"].set_index("group")
    # each send from its launch at 10 ms, 1.02 ms before the receive ends (at 11.02 ms)
    assert (recvs.loc[sends["group"], "end_s"].to_numpy()
            - sends["start_s"].to_numpy()) == pytest.approx(0.00102, abs=2e-6)


def test_without_shapes_the_sends_stay_local(tmp_path):
    docs = {r: _pipeline_doc(r) for r in range(DP * PP)}
    for d in docs.values():
        for e in d["traceEvents"]:
            e["args"].pop("Concrete Inputs", None)
    res = build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json*"))))
    p2p = res.ops[res.ops["kind"].isin(["send", "recv"])]
    assert len(p2p) == 8 and (p2p["group"] < 0).all()


@pytest.mark.parametrize("ci", [["", "", "x", "0"], ["", ""], "1", [None, None, 3]])
def test_odd_concrete_inputs_mean_no_peer_not_an_error(tmp_path, ci):
    docs = {r: _pipeline_doc(r) for r in range(DP * PP)}
    for e in docs[0]["traceEvents"]:
        if "Concrete Inputs" in e["args"]:
            e["args"]["Concrete Inputs"] = ci
    res = build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json*"))))
    sends0 = res.ops[(res.ops["rank"] == 0) & (res.ops["kind"] == "send")]
    assert (sends0["peer"] == -1).all()


def _load(tmp_path, docs):
    return build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json*"))))


def test_each_stage_all_reduce_matches_within_its_dp_group(tmp_path):
    res = _load(tmp_path, {r: _pipeline_doc(r, all_reduce=True) for r in range(DP * PP)})
    ar = res.ops[res.ops["kind"] == "all_reduce"]
    assert (ar["group"] >= 0).all()
    members = ar.groupby("group")["rank"].apply(lambda r: tuple(sorted(r)))
    assert sorted(members) == [(0, 1), (0, 1), (2, 3), (2, 3)]  # per stage, per step
    assert res.report["local_ops"] == 0


def test_without_pg_config_the_all_reduces_fall_back_to_order(tmp_path):
    docs = {r: _pipeline_doc(r, all_reduce=True) for r in range(DP * PP)}
    for d in docs.values():
        del d["distributedInfo"]["pg_config"]
    ar = _load(tmp_path, docs).ops.query("kind == 'all_reduce'")
    # Matched by order over all four ranks, the two stages' ops do not overlap: refused.
    assert (ar["group"] < 0).all()


def test_a_world_collective_takes_the_world_not_a_subgroup():
    # Every rank's k-th all-reduce overlaps every other's: all four are one collective,
    # though each pair also overlaps.
    rows = [{"rank": r, "step": 1, "kind": "all_reduce", "pg": "", "start": 10.0 + r,
             "end": 20.0} for r in range(4)]
    pg = assign_pg(pd.DataFrame(rows), {r: _groups(r) for r in range(4)}, tol_us=1.0)
    assert set(pg) == {"pgcfg:0,1,2,3"}


def test_equal_sized_groups_tie_break_on_the_closest_ends():
    # Stage 1's op (ranks 2, 3) ends at 20; rank 0's DP op with rank 1 ends at 30 and
    # overlaps rank 2's (a long wait): pipeline group [0, 2] overlaps too, but its
    # members leave 10 apart where [0, 1]'s leave together.
    rows = [(0, 12.0, 30.0), (1, 25.0, 30.0), (2, 5.0, 20.0), (3, 18.0, 20.0)]
    assert _one_all_reduce_each(rows, tol_us=1.0) == ["pgcfg:0,1", "pgcfg:0,1", "pgcfg:2,3",
                                                      "pgcfg:2,3"]


def _one_all_reduce_each(rows: list[tuple[int, float, float]], tol_us: float) -> list[str]:
    """assign_pg over one all-reduce per (rank, start, end) in the DP and pipeline groups."""
    c = pd.DataFrame([{"rank": r, "step": 1, "kind": "all_reduce", "pg": "", "start": s,
                       "end": e} for r, s, e in rows])
    return assign_pg(c, {r: _groups(r)[1:] for r in range(4)}, tol_us=tol_us).tolist()


def test_a_collective_takes_one_group_for_all_its_members():
    # DP 2 x PP 2, each rank's one all-reduce: stage 0's DP pair (0, 1) leaves together,
    # stage 1's (2, 3) 1.5 us apart (rank 2 waited for a slow rank 3); the pipeline pair
    # (1, 3) also overlaps within the tolerance and leaves 0.4 us apart. Rank 3's closest
    # group alone is (1, 3), which rank 1 cannot share (its op is (0, 1)'s): ranks 2 and 3
    # would each be left in a group of one.
    rows = [(0, 0.0, 100.0), (1, 99.0, 100.1), (2, 0.0, 102.0), (3, 99.5, 100.5)]
    assert _one_all_reduce_each(rows, tol_us=1000.0) == ["pgcfg:0,1", "pgcfg:0,1",
                                                         "pgcfg:2,3", "pgcfg:2,3"]


def _unnamed(docs: dict[int, dict]) -> dict[int, dict]:
    for d in docs.values():
        d.pop("host_name", None)  # torch 2.11 wrote none in CPU traces
    return docs


def test_without_host_names_one_clock_is_kept_when_it_explains_the_groups(tmp_path):
    # Seen on a 16-core machine (torch 2.11): `collective` alignment over the all-reduces
    # matched by order across both stages shifted a stage-1 rank by 20 ms, unmatched 96
    # of 108 groups and read a clean pipeline at S 0.91.
    res = _load(tmp_path, _unnamed({r: _pipeline_doc(r, all_reduce=True)
                                    for r in range(DP * PP)}))
    assert res.report["align"] == "none"
    assert set(res.report["clock_offsets_s"].values()) == {0.0}
    assert res.report["implausible_groups_unmatched"] == 0 and res.report["local_ops"] == 0
    ar = res.ops[res.ops["kind"] == "all_reduce"]
    assert sorted(ar.groupby("group")["rank"].apply(lambda r: tuple(sorted(r)))) == \
        [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert any("name no host" in n and "none 0" in n for n in res.notes)


def test_without_host_names_skewed_clocks_are_aligned_on_the_collectives(tmp_path):
    from tests.unit.general_fixtures import ddp_doc

    docs = _unnamed({r: ddp_doc(r, world=2, gpu=False) for r in range(2)})
    for e in docs[1]["traceEvents"]:
        e["ts"] += 40 * MS  # rank 1's clock runs 40 ms ahead: no op overlaps its peer's
    res = _load(tmp_path, docs)
    assert res.report["align"] == "collective"
    assert res.report["clock_offsets_s"]["1"] == pytest.approx(-0.040, abs=1e-4)
    assert res.report["implausible_groups_unmatched"] == 0
    assert (res.ops.query("kind == 'all_reduce'")["group"] >= 0).all()


def test_a_step_that_lost_its_p2p_keeps_each_rank_in_its_own_role(tmp_path):
    # DP 1's pipeline (ranks 1 and 3) lost its send and recv events in the second step:
    # read per step, both ranks' patterns were "all_reduce" there, one role across two
    # stages, and averaging their compute read a clean job at S 0.92.
    from stragglerlab.analysis.whatif_general import whatif_general

    docs = {r: _pipeline_doc(r, all_reduce=True) for r in range(DP * PP)}
    for r in (1, 3):
        second = [e for e in docs[r]["traceEvents"] if e["name"].startswith("ProfilerStep#")][1]
        lo, hi = second["ts"], second["ts"] + second["dur"]
        docs[r]["traceEvents"] = [e for e in docs[r]["traceEvents"] if not (
            lo <= e["ts"] <= hi and any(p in e["name"] for p in ("send", "recv")))]
    res = _load(tmp_path, _unnamed(docs))
    roles = res.ops.groupby("rank")["role"].nunique()
    assert (roles == 1).all()  # one role per rank
    by_rank = res.ops.groupby("rank")["role"].first()
    assert by_rank[0] == by_rank[1] != by_rank[2] == by_rank[3]  # the stages
    assert whatif_general(res.ops).S == pytest.approx(1.0, abs=1e-3)
