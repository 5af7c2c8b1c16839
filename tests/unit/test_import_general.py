"""The general op model (unannotated Kineto traces): import, matching, what-if, errors."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.whatif_general import _ideal_transfers, whatif_general
from stragglerlab.cli import main
from stragglerlab.importers import stream_json
from stragglerlab.importers.kineto_events import VocabularyFound, read_rank
from stragglerlab.importers.kineto_general import build_general, load_ranks
from stragglerlab.importers.stream_json import TraceReader
from stragglerlab.trace.op_model import STEP_END
from stragglerlab.util.errors import InputError
from tests.unit.general_fixtures import ddp_doc, ddp_job, write_docs

HTA = Path("/work/shared/external-traces/hta-sampled-2rank")
EXPECTED_S = 27.0 / 19.5
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kineto-dp2-pp2"


def _import(folder: Path, **kw):
    return build_general(load_ranks(sorted(folder.glob("*.json*"))), **kw)


@pytest.mark.skipif(not HTA.is_dir(), reason="the external HTA trace is not on this host")
def test_external_hta_trace_imports_and_analyses(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["import", "kineto", "--traces", str(HTA), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "op model: general" in captured.err
    report = json.loads((out / "import.json").read_text())
    assert report["model"] == "general" and report["ranks"] == [0, 1]
    assert report["world_size"] == 128 and report["steps"] == [551, 552]
    assert any("2 of the job's 128 ranks" in n for n in report["notes"])
    ops = pd.read_parquet(out / "ops.parquet")
    comm = ops[ops["kind"] != "step-end"]
    assert set(comm["kind"]) == {"all_to_all", "all_reduce", "all_gather"}
    both = comm[comm["group"] >= 0].groupby("group")["rank"].agg(lambda r: sorted(r))
    assert len(both) >= 4 and all(r == [0, 1] for r in both)  # matched across both ranks
    wi = json.loads((out / "whatif.json").read_text())
    assert math.isfinite(wi["S"]) and wi["S"] >= 1.0
    assert set(wi["per_step"]) == {"551", "552"}
    assert abs(wi["discrepancy"]) < 0.02  # the replay reproduces the traced step time
    for share in (wi["kind_share"], wi["rank_share"]):
        assert sum(share.values()) == pytest.approx(1.0)
    assert all(math.isfinite(v) and v > 0 for v in wi["by_kind"].values())
    # M_W = (T - T_fixW) / (T - T_ideal) is no share bounded by 1 (docs/whatif.md), and at
    # S 1.004 its denominator is 2.6 ms: finite is all it promises here.
    assert wi["top_workers"] and math.isfinite(wi["M_W"])
    assert 0 < report["async_ops"] < report["ops"]  # NCCL kernels the compute ran beside
    assert "what-if: S = " in captured.out


@pytest.mark.parametrize("gpu", [True, False])
def test_ddp_slow_rank_exact_slowdown(tmp_path, gpu):
    res = _import(ddp_job(tmp_path, slow={3: 2.0}, gpu=gpu))
    assert res.report["timing"] == ("gpu" if gpu else "cpu")
    assert res.report["groups"] == 2 and res.report["local_ops"] == 0
    wi = whatif_general(res.ops)
    assert wi.S == pytest.approx(EXPECTED_S, rel=1e-6)
    assert wi.T == pytest.approx(0.027, rel=1e-6) and wi.discrepancy == pytest.approx(0, abs=1e-6)
    assert wi.top_workers == [3] and wi.by_rank[3] == pytest.approx(EXPECTED_S, rel=1e-6)
    assert wi.by_kind["compute"] == pytest.approx(EXPECTED_S, rel=1e-6)
    assert wi.by_kind["all_reduce"] == pytest.approx(1.0)
    assert wi.M_W == pytest.approx(1.0)
    if gpu:
        busy = res.ops.loc[(res.ops["rank"] == 0) & (res.ops["k"] == 0), "busy_s"]
        assert busy.to_numpy() == pytest.approx(0.00998)


def test_clean_job_has_no_slowdown(tmp_path):
    wi = whatif_general(_import(ddp_job(tmp_path)).ops)
    assert wi.S == pytest.approx(1.0) and not wi.straggling


def test_a_settling_first_step_is_reported_as_on_our_own_traces(tmp_path):
    # The first of 8 steps runs 20 ms long on every rank (a job still warming up): the
    # general what-if names it in its notes, as the what-if of our own traces does.
    steps = range(1, 9)
    wi = whatif_general(_import(ddp_job(tmp_path / "warm", world=2, steps=steps, gpu=False,
                                        first_tail_ms=20.0)).ops)
    assert any("first traced step(s) 1 still settling" in n for n in wi.notes), wi.notes
    assert wi.step_time_actual_s[1] > 1.5 * wi.step_time_actual_s[2]
    settled = whatif_general(_import(ddp_job(tmp_path / "flat", world=2, steps=steps,
                                             gpu=False)).ops)
    assert not any("settling" in n for n in settled.notes), settled.notes


def test_matching_by_seq_survives_a_different_issue_order(tmp_path):
    docs = {r: ddp_doc(r, world=2, steps=(1,)) for r in range(2)}
    # rank 1 also runs a second all-reduce (Seq 7) on another group before the first one
    # ends: the match must follow (process group, Seq), not the order in the trace
    for r, d in docs.items():
        k = next(e for e in d["traceEvents"] if e["name"].startswith("ncclDev"))
        extra = json.loads(json.dumps(k))
        extra["args"].update({"Process Group Name": "9", "Seq": 7, "correlation": 99})
        extra["ts"] = k["ts"] + (-200 if r == 1 else k["dur"] + 100)
        extra["dur"] = 100 if r == 1 else 300
        d["traceEvents"].append(extra)
    res = _import(write_docs(tmp_path, docs))
    ops = res.ops[res.ops["kind"] == "all_reduce"]
    assert ops.groupby("group")["pg"].nunique().eq(1).all()
    assert sorted(ops.groupby("group")["pg"].first()) == ["0", "9"]


def test_matching_by_order_without_seq_and_p2p_pairs(tmp_path):
    docs = {r: ddp_doc(r, world=2, steps=(1, 2), seq=False) for r in range(2)}
    for r, d in docs.items():  # a send 0 -> 1 and its recv, per step
        for e in [e for e in d["traceEvents"] if e["name"] == "ProfilerStep#1"]:
            name = "send" if r == 0 else "recv"
            d["traceEvents"].append({"ph": "X", "cat": "kernel", "name":
                                     "ncclDevKernel_SendRecv", "pid": 0, "tid": 30,
                                     "ts": e["ts"] + 20_000, "dur": 500, "args": {
                                         "Collective name": name, "stream": 30,
                                         "Src Rank": 0, "Dst Rank": 1, "correlation": -5}})
    res = _import(write_docs(tmp_path, docs))
    ops = res.ops
    p2p = ops[ops["kind"].isin(["send", "recv"])]
    assert len(p2p) == 2 and p2p["group"].nunique() == 1 and (p2p["group"] >= 0).all()
    ar = ops[ops["kind"] == "all_reduce"]
    assert ar["group"].nunique() == 2 and ar.groupby("group")["rank"].nunique().eq(2).all()
    assert ar.groupby("group")["step"].nunique().eq(1).all()


def test_vocabulary_traces_keep_the_vocabulary_path(tmp_path, capsys):
    with pytest.raises(VocabularyFound):
        load_ranks(sorted(EXAMPLE.glob("*.json.gz")), stop_at_vocab=True)
    out = tmp_path / "o"
    assert main(["import", "kineto", "--traces", str(EXAMPLE), "--out", str(out)]) == 0
    assert "op model: vocabulary" in capsys.readouterr().err
    assert json.loads((out / "import.json").read_text())["model"] == "vocabulary"
    assert (out / "trace.parquet").is_file() and not (out / "ops.parquet").exists()


def test_parallel_read_equals_serial(tmp_path):
    files = sorted(ddp_job(tmp_path, slow={1: 1.5}).glob("*.json"))
    serial = build_general(load_ranks(files, processes=1)).ops
    parallel = build_general(load_ranks(files, processes=2)).ops
    pd.testing.assert_frame_equal(serial, parallel)


def test_stream_reader_small_chunks_equal_json_loads(tmp_path, monkeypatch):
    doc = {"a": {"b": "}{]["}, "traceEvents": [
        {"ph": "X", "name": 'q"}]{"\\', "ts": 1, "dur": 2, "args": {"x": [1, {"y": "]"}]}},
        {"ph": "M", "name": "\\\\", "args": {}}, 7, "s"] * 50, "baseTimeNanoseconds": 5}
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    monkeypatch.setattr(stream_json, "BATCH_BYTES", 64)
    monkeypatch.setattr(stream_json, "READ_BYTES", 7)
    r = TraceReader(path=f)
    events = [e for b in r.batches() for e in b]
    assert events == doc["traceEvents"]
    assert r.header == {"a": {"b": "}{]["}, "baseTimeNanoseconds": 5}


def _err(tmp_path, capsys, folder) -> str:
    code = main(["import", "kineto", "--traces", str(folder), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    return err


def test_error_no_collective(tmp_path, capsys):
    err = _err(tmp_path, capsys, ddp_job(tmp_path / "t", comm=False))
    assert "no collective or P2P communication" in err


def test_error_one_rank_without_collectives_while_the_others_have_them(tmp_path, capsys):
    docs = {0: ddp_doc(0, world=2, comm=False), 1: ddp_doc(1, world=2)}
    err = _err(tmp_path, capsys, write_docs(tmp_path / "t", docs))
    assert "1 of 2 ranks hold no collective or P2P communication" in err and "rank 0" in err


def test_error_single_rank(tmp_path, capsys):
    # a GPU rank's trace alone gets the host-device replay instead (test_host_device.py)
    err = _err(tmp_path, capsys, write_docs(tmp_path / "t", {0: ddp_doc(0, gpu=False)}))
    assert "one rank's trace only" in err


def test_error_no_traces_through_the_api():
    # the CLI finds no files first; the library, called on an empty list, said max() of an
    # empty sequence
    with pytest.raises(InputError, match="no rank traces to import"):
        build_general(load_ranks([]))
    from stragglerlab.importers.kineto import import_kineto

    with pytest.raises(InputError, match="no rank traces to import"):
        import_kineto([])  # the vocabulary path: an IndexError before


def test_missing_steps_keep_the_common_ones_and_no_step_is_an_error(tmp_path, capsys):
    docs = {r: ddp_doc(r, world=2, steps=(5, 6) if r else (5,)) for r in range(2)}
    res = _import(write_docs(tmp_path / "t", docs))
    assert res.report["steps"] == [5]
    assert any("rank 0 lacks [6]" in n for n in res.notes)
    docs[1] = ddp_doc(1, world=2, steps=(6,))
    assert "no ProfilerStep#N that every rank has" in _err(tmp_path, capsys,
                                                          write_docs(tmp_path / "v", docs))
    docs[0]["traceEvents"] = [e for e in docs[0]["traceEvents"]
                              if not e["name"].startswith("ProfilerStep")]
    err = _err(tmp_path, capsys, write_docs(tmp_path / "u", docs))
    assert "rank 0 has no complete ProfilerStep" in err


@pytest.mark.parametrize("text,needle", [
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", ', "ends inside"),
    ('{"traceEvents": [{"ph": "X", "ts": 1,, }]}', "not valid JSON"),
    ("garbage", "not valid JSON"),
    ('{"traceEvents": 3}', "not a list"),
    ('{"other": []}', "no 'traceEvents' list"),
    ("[null, null]", "a JSON list, not a Chrome trace object"),
    ('[{"ph": "X", "ts": 1, "dur": 2}]', "a JSON list, not a Chrome trace object"),
])
def test_error_truncated_or_garbage_json(tmp_path, capsys, text, needle):
    folder = write_docs(tmp_path / "t", {1: ddp_doc(1, world=2)})
    (folder / "rank0.json").write_text(text)
    err = _err(tmp_path, capsys, folder)
    assert needle in err and "rank0.json" in err


def test_error_truncated_gzip(tmp_path, capsys):
    folder = write_docs(tmp_path / "t", {r: ddp_doc(r, world=2) for r in range(2)}, gz=True)
    data = (folder / "rank0.json.gz").read_bytes()
    (folder / "rank0.json.gz").write_bytes(data[: len(data) // 2])
    assert "truncated" in _err(tmp_path, capsys, folder)


def test_error_gzip_bomb_refused_early(tmp_path, capsys):
    folder = write_docs(tmp_path / "t", {1: ddp_doc(1, world=2)})
    body = b'{"traceEvents": [' + b" " * (96 << 20) + b"]}"
    (folder / "rank0.json.gz").write_bytes(gzip.compress(body, compresslevel=1))
    err = _err(tmp_path, capsys, folder)
    assert "gzip bomb" in err and "rank0.json.gz" in err


def test_bomb_cap_on_absolute_size(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps(ddp_doc(0)))
    with pytest.raises(InputError, match="decompresses past"):
        read_rank(f, max_bytes=1000)


def test_rank_from_file_name_without_distributed_info(tmp_path):
    folder = write_docs(tmp_path, {r: ddp_doc(r, world=2, info=False) for r in range(2)})
    res = _import(folder)
    assert res.report["ranks"] == [0, 1]
    assert any("taken from the file name" in n for n in res.notes)
    assert np.isfinite(whatif_general(res.ops).S)


def test_unranked_files_are_numbered_in_name_order(tmp_path):
    """tensorboard_trace_handler's names (`<host>_<pid>.<ts>.pt.trace.json`) and no
    distributedInfo (older torch): ranks are the files' natural name order."""
    names = {0: "node_2.1.pt.trace.json", 1: "node_10.1.pt.trace.json",
             2: "node_11.1.pt.trace.json", 3: "node_100.1.pt.trace.json"}
    for r, name in names.items():
        (tmp_path / name).write_text(json.dumps(ddp_doc(r, world=4, slow={2: 2.0},
                                                        info=False)))
    res = _import(tmp_path)
    assert res.report["ranks"] == [0, 1, 2, 3]
    assert any("node_2.1.pt.trace.json is rank 0" in n for n in res.notes)
    wi = whatif_general(res.ops)
    assert wi.S == pytest.approx(EXPECTED_S, rel=1e-3) and wi.top_workers == [2]


def test_some_ranked_some_not_is_one_clear_error(tmp_path, capsys):
    (tmp_path / "rank0.json").write_text(json.dumps(ddp_doc(0, world=2, info=False)))
    (tmp_path / "worker.json").write_text(json.dumps(ddp_doc(1, world=2, info=False)))
    msg = _err(tmp_path, capsys, tmp_path)
    assert "1 of 2 files name no rank" in msg and "worker.json" in msg


def test_layout_flag_gives_dp_stage_attribution_and_m_s(tmp_path):
    from stragglerlab.importers.layout import Layout

    res = _import(ddp_job(tmp_path, slow={3: 2.0}), layout=Layout.parse("dp=2,pp=2"))
    wi = whatif_general(res.ops)
    # roles = stages: stage 1 (ranks 2, 3) idealizes to 15 ms, so T_ideal = 15 + 2 + 5 ms
    assert wi.S == pytest.approx(27 / 22, rel=1e-6)
    assert wi.by_stage == pytest.approx({0: 1.0, 1: 27 / 22}, rel=1e-6)
    assert wi.by_dp == pytest.approx({0: 1.0, 1: 27 / 22}, rel=1e-6)
    assert wi.top_workers == [3] and wi.M_S == pytest.approx(1.0)
    assert res.report["layout"]["source"] == "--layout"
    # A DDP job has no P2P: pp=2 is said aloud, the user may mean it (or be wrong).
    assert any("says pp=2, but no P2P send/recv was found" in n for n in res.notes)


def test_one_stray_vocabulary_name_stays_general(tmp_path):
    docs = {r: ddp_doc(r, world=2) for r in range(2)}
    for d in docs.values():
        e = next(e for e in d["traceEvents"] if e["name"] == "aten::add")
        d["traceEvents"].append({**e, "cat": "user_annotation", "name": "optimizer"})
    events = load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json")), stop_at_vocab=True)
    assert [e.vocab_ranges for e in events] == [1, 1]


def test_error_malformed_event_times(tmp_path, capsys):
    docs = {r: ddp_doc(r, world=2) for r in range(2)}
    k = next(e for e in docs[0]["traceEvents"] if e["cat"] == "kernel")
    k["ts"] = "12"
    err = _err(tmp_path, capsys, write_docs(tmp_path / "t", docs))
    assert "malformed" in err and "rank0.json" in err


def test_older_torch_labels_from_the_launching_range_eight_ranks(tmp_path):
    res = _import(ddp_job(tmp_path, world=8, slow={5: 2.0}, old_torch=True))
    assert res.report["label_sources"] == {"annotation": 16}
    assert res.report["groups"] == 2 and res.report["local_ops"] == 0
    wi = whatif_general(res.ops)
    assert wi.S == pytest.approx(27 / (10 * 9 / 8 + 7), rel=1e-6) and wi.top_workers == [5]


def test_torch_1_8_categories_and_string_thread_ids(tmp_path):
    """Kineto traces of torch 1.8-1.9 name categories `Kernel`, `Runtime`, `Operator`, ...
    and GPU threads `stream 7`: the same job imports as it does in today's names."""
    old = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cpu_op": "Operator",
           "user_annotation": "Operator"}
    docs = {r: ddp_doc(r, world=8, slow={5: 2.0}, old_torch=True) for r in range(8)}
    for d in docs.values():
        for e in d["traceEvents"]:
            e["cat"] = old.get(e.get("cat"), e.get("cat"))
            if e["cat"] == "Kernel":
                e["tid"] = f"stream {e['tid']}"
    res = _import(write_docs(tmp_path, docs))
    assert res.report["groups"] == 2 and res.report["local_ops"] == 0
    wi = whatif_general(res.ops)
    assert wi.S == pytest.approx(27 / (10 * 9 / 8 + 7), rel=1e-6) and wi.top_workers == [5]


@pytest.mark.parametrize("split", range(1, 24))
def test_stream_reader_key_split_across_blocks(tmp_path, monkeypatch, split):
    head = b'{"x": 1, "traceEvents"  :  [{"ph": "X"}], "y": 2}'
    f = tmp_path / "t.json"
    f.write_bytes(head)
    monkeypatch.setattr(stream_json, "READ_BYTES", split)
    r = TraceReader(path=f)
    assert [e for b in r.batches() for e in b] == [{"ph": "X"}]
    assert r.header == {"x": 1, "y": 2}


def _transfer_rows(sized: bool) -> pd.DataFrame:
    # FSDP-like: per step and rank a large gather (the root's, 8 ms) then a small one (2 ms)
    rows = [dict(rank=r, step=s, k=k, kind="all_gather", role=0, transfer_s=t,
                 in_nelems=(n if sized else -1), out_nelems=(2 * n if sized else -1),
                 group=10 * s + k)
            for r in (0, 1) for s in (5, 6, 7) for k, (t, n) in enumerate([(0.008, 4096),
                                                                          (0.002, 256)])]
    rows += [dict(rank=r, step=s, k=2, kind=STEP_END, role=0, transfer_s=0.0, in_nelems=-1,
                  out_nelems=-1, group=-1) for r in (0, 1) for s in (5, 6, 7)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("sized", [True, False])
def test_transfers_idealize_within_the_same_work_not_the_whole_kind(sized):
    # Pooling every all_gather would idealize the large one to the small one's time and
    # read a clean job as straggling; the same message size (or, unsized, the same chain
    # position) is the same work, as one Megatron optype is.
    ops = _transfer_rows(sized)
    assert _ideal_transfers(ops) == pytest.approx(ops["transfer_s"].to_numpy())
    ops.loc[(ops["rank"] == 1) & (ops["step"] == 6) & (ops["k"] == 0), "transfer_s"] = 0.020
    ideal = _ideal_transfers(ops)
    assert ideal[(ops["k"] == 0).to_numpy()] == pytest.approx(0.008)  # the median of its work


@pytest.mark.parametrize("sized", [True, False])
def test_an_unmatched_ops_wait_does_not_lengthen_matched_transfers(sized):
    # A local op's transfer is its whole duration, its wait for unseen peers included;
    # pooled with the matched ops of the same work, its 30 ms would have been the ideal of
    # the 2 ms ones in a 2-of-3 median (a clean pipeline would read S 0.87 so).
    ops = _transfer_rows(sized)
    k1 = (ops["k"] == 1).to_numpy()
    local = k1 & (ops["step"] >= 6).to_numpy()
    ops.loc[local, "group"], ops.loc[local, "transfer_s"] = -1, 0.030
    ideal = _ideal_transfers(ops)
    assert ideal[k1 & ~local] == pytest.approx(0.002)
    assert ideal[local] == pytest.approx(0.030)  # its own work: nothing to tell wait from it
