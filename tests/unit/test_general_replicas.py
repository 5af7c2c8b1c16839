"""The general what-if's rank and DP-rank replays on one replica per class
(analysis/general_replicas.py): bit for bit the replays of the whole table where the
argument holds, and the whole table wherever it does not."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stragglerlab.analysis.whatif_general as wg
from stragglerlab.analysis.general_replicas import MAX_CLASSES, replicas
from stragglerlab.analysis.general_sim import schedule
from stragglerlab.importers.kineto_events import load_ranks
from stragglerlab.importers.kineto_general import build_general
from tests.unit.bench_modules import load_benchmark

general_ops_at_dp = load_benchmark("asv_bench/inputs").general_ops_at_dp


def _both(ops: pd.DataFrame, monkeypatch, **kw) -> tuple[str, str, list[bool]]:
    """whatif.json's fields with the two-replica replays, and with the whole table."""
    used = []

    def spy(*a):
        r = replicas(*a)
        used.append(r is not None)
        return r

    monkeypatch.setattr(wg, "replicas", spy)
    fast = json.dumps(wg.whatif_general(ops, **kw).to_dict(), sort_keys=True)
    monkeypatch.setattr(wg, "replicas", lambda *a: None)
    whole = json.dumps(wg.whatif_general(ops, **kw).to_dict(), sort_keys=True)
    return fast, whole, used


def _ready(ops: pd.DataFrame) -> tuple[pd.DataFrame, object]:
    ops = ops.sort_values(["rank", "step", "k"], kind="stable", ignore_index=True)
    return ops, schedule(ops)


@pytest.mark.parametrize("dp,seed,stat", [(3, 0, "mean"), (8, 1, "mean"), (8, 2, "median")])
def test_pipeline_replicas_replay_the_whole_job_bit_for_bit(dp, seed, stat, monkeypatch):
    """DP x PP 2 with posted receives and one slow rank: every field, every rank's and DP
    rank's ratio, identical; the slow rank still ranked first."""
    ops = general_ops_at_dp(dp, seed=seed)
    fast, whole, used = _both(ops, monkeypatch, compute_ideal=stat)
    assert used == [True]
    assert fast == whole
    assert json.loads(fast)["top_workers"][0] == 1


def test_gpu_host_model_replicas_are_exact(tmp_path, monkeypatch):
    """A GPU job whose host is modelled (the host parts replayed on the lanes as well)."""
    synth = load_benchmark("kineto_gpu_synth")
    traces = synth.write_job("launch-bound-host-slow", tmp_path / "traces", world=4)
    imp = build_general(load_ranks(sorted(traces.glob("*.json*"))))
    assert "host_s" in imp.ops
    fast, whole, used = _both(imp.ops, monkeypatch, report=imp.report)
    assert used == [True]
    assert fast == whole


def test_an_imported_gpu_job_with_a_slow_rank(tmp_path, monkeypatch):
    """A synthetic DDP job's GPU traces through the importer: the slow rank's kernels do
    not queue as its peers' do, so it is a class of its own; exact, and ranked first."""
    synth = load_benchmark("kineto_synth")
    paths = synth.write_job(tmp_path / "traces", ranks=8, mb=0.3, steps=3, slow_rank=5,
                            workers=1)
    imp = build_general(load_ranks(sorted(paths)))
    fast, whole, used = _both(imp.ops, monkeypatch, report=imp.report)
    assert used == [True]
    assert fast == whole
    assert json.loads(fast)["top_workers"] == [5]


def test_classes_of_replicas_are_exact(monkeypatch):
    """Two replicas whose ops queue on their stream, whose receives block and whose
    all-reduce messages are larger make a second class (it ends its steps last); a third
    replica's transfers run slow (its values, not its class). Each scenario replays on its
    replica and one of every class."""
    ops = general_ops_at_dp(8, seed=3)
    queued = ops["rank"].isin([2, 10, 5, 13]) & (ops["k"] > 0)
    ops.loc[queued, "serial"] = True
    blocking = ops["rank"].isin([10, 13]) & ops["async"]  # their receives not posted
    ops.loc[blocking, "async"], ops.loc[blocking, "wait_k"] = False, -1
    big = ops["rank"].isin([2, 10, 5, 13]) & (ops["kind"] == "all_reduce")
    ops.loc[big, "in_nelems"] = 2  # a larger message: a longer ideal transfer
    ops.loc[big, "transfer_s"] *= 3
    slow = ops["rank"].isin([6, 14])
    ops.loc[slow, "transfer_s"] *= 4
    srt, sched = _ready(ops)
    rep = replicas(srt, sched, [np.zeros(len(srt))])
    assert rep is not None and len(rep.lanes) == 2
    assert sorted(np.bincount(rep.cls).tolist()) == [2, 6]
    fast, whole, used = _both(ops, monkeypatch)
    assert used == [True]
    assert fast == whole


def test_unlike_replicas_replay_the_whole_table():
    """Each break of the argument falls back: an extra op on one replica, a collective
    over some replicas only, ideal values that differ between replicas, two replicas."""
    base = general_ops_at_dp(4)
    ops, sched = _ready(base)
    gap = ops["gap_s"].to_numpy()
    assert replicas(ops, sched, [np.zeros(len(ops))]) is not None
    assert replicas(ops, sched, [gap]) is None  # traced gaps differ: a class per replica
    ops, sched = _ready(general_ops_at_dp(MAX_CLASSES + 4))
    assert replicas(ops, sched, [ops["gap_s"].to_numpy()]) is None  # beyond MAX_CLASSES

    extra = base[(base["rank"] == 2) & (base["step"] == 0) & (base["k"] == 0)].copy()
    extra["k"], extra["group"] = 99, -1
    ops, sched = _ready(pd.concat([base, extra]))
    assert replicas(ops, sched, []) is None

    sub = base.copy()  # stage 0's all-reduce of step 0 split into two halves of the DP ranks
    ar = (sub["kind"] == "all_reduce") & (sub["stage"] == 0) & (sub["step"] == 0)
    sub.loc[ar & (sub["dp_rank"] >= 2), "group"] = sub["group"].max() + 1
    ops, sched = _ready(sub)
    assert replicas(ops, sched, []) is None

    swapped = base.copy()  # one replica's first two forward sends pair the other way
    sends = swapped.index[(swapped["rank"] == 2) & (swapped["step"] == 0)
                          & (swapped["kind"] == "send")][:2]
    swapped.loc[sends, "group"] = swapped.loc[sends[::-1], "group"].to_numpy()
    ops, sched = _ready(swapped)
    assert sched.released == 0
    assert replicas(ops, sched, []) is None

    ops, sched = _ready(general_ops_at_dp(2))
    assert replicas(ops, sched, []) is None


def test_replicas_follow_the_pipeline_links():
    """Without a layout, replicas are the ranks P2P joins, one slot per stage, whatever
    their rank numbers; with one, the DP ranks (the same here)."""
    ops = general_ops_at_dp(4)
    no_layout = ops.assign(dp_rank=-1, stage=-1)
    for table in (ops, no_layout):
        srt, sched = _ready(table)
        rep = replicas(srt, sched, [])
        assert rep.rows.shape[0] == 4
        for d in range(4):
            assert rep.replica_of_rank[d] == rep.replica_of_rank[4 + d]
            assert {rep.slot_of_rank[d], rep.slot_of_rank[4 + d]} == {0, 1}
        assert len(set(rep.replica_of_rank.values())) == 4


def _dp_tp(dp: int, tp: int, steps: int = 4, slow: int = 5) -> pd.DataFrame:
    """A DP x TP job's op table with its layout: per rank and step a tensor-parallel
    all-reduce within its DP rank, then a data-parallel one across DP ranks, then the step
    end; rank `slow`'s compute 1.4x."""
    rng = np.random.default_rng(7)
    rows = []
    for d in range(dp):
        for t in range(tp):
            rank = d * tp + t
            for step in range(steps):
                at = step * 10.0
                for k, (kind, key) in enumerate([("all_reduce", ("tp", d, step)),
                                                 ("all_reduce", ("dp", t, step)),
                                                 ("step-end", None)]):
                    gap = 0.01 * (1.4 if rank == slow else 1.0) * (1 + 0.05 * rng.standard_normal())
                    at += gap
                    rows.append({"rank": rank, "step": step, "k": k, "kind": kind, "key": key,
                                 "start_s": at, "end_s": at + 0.002, "gap_s": gap,
                                 "transfer_s": 0.0 if key is None else 0.002, "dp_rank": d})
                    at += 0.002
    df = pd.DataFrame(rows)
    df["group"] = pd.factorize(df["key"], use_na_sentinel=True)[0]
    df["pg"], df["busy_s"], df["ready_s"] = "", np.nan, df["start_s"]
    df["async"], df["serial"], df["wait_k"] = False, False, -1
    df["in_nelems"] = df["out_nelems"] = np.int64(-1)
    df["peer"], df["role"], df["stage"] = -1, 0, 0
    return df.drop(columns=["key"])


def test_tensor_parallel_ranks_share_a_replica(monkeypatch):
    """DP 4 x TP 2: the DP ranks are the replicas, two slots each (the tensor-parallel group
    stays within one), with the layout or, without it, from the groups' widths; exact, the
    slow rank's S_rank first. (Its worker score is min(S_dp, S_stage): the slow rank's DP
    rank, shared with its TP peer.)"""
    ops = _dp_tp(4, 2)
    for table in (ops, ops.assign(dp_rank=-1)):
        srt, sched = _ready(table)
        rep = replicas(srt, sched, [])
        assert rep is not None and rep.rows.shape[0] == 4
        assert rep.replica_of_rank[4] == rep.replica_of_rank[5]
        assert rep.slot_of_rank[4] != rep.slot_of_rank[5]
        fast, whole, used = _both(table, monkeypatch)
        assert used == [True]
        assert fast == whole
        by_rank = json.loads(fast)["by_rank"]
        assert max(by_rank, key=by_rank.get) == "5"


def test_the_widest_collectives_go_across_replicas(monkeypatch):
    """Without a layout: TP wider than DP makes each TP rank's DP peers one replica (still
    exact); as wide as DP leaves no narrower group to join ranks by, and every rank alone
    cannot hold a group over some of them: the whole table."""
    ops = _dp_tp(2, 4, slow=2).assign(dp_rank=-1)
    srt, sched = _ready(ops)
    rep = replicas(srt, sched, [])
    assert rep is not None and rep.rows.shape[0] == 4
    assert rep.replica_of_rank[1] == rep.replica_of_rank[5]
    fast, whole, used = _both(ops, monkeypatch)
    assert used == [True] and fast == whole
    srt, sched = _ready(_dp_tp(3, 3).assign(dp_rank=-1))
    assert replicas(srt, sched, []) is None


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dp=st.integers(3, 6), pp=st.integers(1, 3), seed=st.integers(0, 10_000),
       data=st.data())
def test_any_mix_of_classes_is_exact(dp, pp, seed, data, monkeypatch):
    """Random layouts, a random slow rank's transfers, random replicas whose ops queue or
    whose posted receives block, with or without the layout: the fast path, wherever it
    is taken (21 of the 30 examples), gives the whole table's whatif.json."""
    ops = general_ops_at_dp(dp, pp=pp, seed=seed)
    ranks = sorted(ops["rank"].unique())
    slow = data.draw(st.sampled_from(ranks))
    ops.loc[ops["rank"] == slow, "transfer_s"] *= data.draw(st.floats(1.0, 5.0))
    for d in data.draw(st.sets(st.integers(0, dp - 1), max_size=dp)):
        mine = ops["dp_rank"] == d
        if data.draw(st.booleans()):
            ops.loc[mine & (ops["k"] > 0), "serial"] = True
        else:
            block = mine & ops["async"]
            ops.loc[block, "async"], ops.loc[block, "wait_k"] = False, -1
    if data.draw(st.booleans()):
        ops = ops.assign(dp_rank=-1, stage=-1)
    fast, whole, _used = _both(ops, monkeypatch)
    assert fast == whole
