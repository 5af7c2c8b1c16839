"""The Kineto importer: parsing, layout, clock alignment, gz/plain and one clear error per fault.

    .venv/bin/python -m pytest -q tests/unit/test_import_kineto.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.importers.kineto import find_traces, import_kineto
from stragglerlab.importers.layout import Layout
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.util.errors import InputError
from tests.unit.kineto_fixtures import FIXTURES, rank_doc, write

DP2PP2 = FIXTURES / "dp2-pp2"


def _files(tmp_path: Path, docs: dict[int, dict]) -> list[Path]:
    return [write(d, tmp_path / f"rank{r}.json") for r, d in sorted(docs.items())]


def _docs(**kw) -> dict[int, dict]:
    return {r: rank_doc(r, **kw) for r in range(4)}


def test_parses_fixture_gz_and_plain():
    files = find_traces(str(DP2PP2))
    assert sorted(f.name for f in files) == ["rank0.json", "rank1.json.gz", "rank2.json",
                                             "rank3.json.gz"]
    res = import_kineto(files)
    df = res.df
    assert res.meta.dp_size == 2 and res.meta.pp_size == 2 and res.meta.world_size == 4
    assert sorted(df["step"].unique()) == [3, 4]
    w = df[(df["rank"] == 0) & (df["step"] == 3)]
    # nested forward-compute dropped (outermost wins); async sends kept despite overlapping
    assert (w["optype"] == "forward-compute").sum() == 2
    assert (w["optype"] == "forward-send").sum() == 2
    fwd = w[w["optype"] == "forward-compute"]
    assert list(fwd["seq_id"]) == [0, 1] and list(fwd["mb_id"]) == [0, 1]
    assert fwd["duration"].tolist() == pytest.approx([800e-6, 800e-6])
    assert (w[w["optype"] == "optimizer"]["mb_id"] == -1).all()
    assert (df["mc"] == -1).all() and (df["gmc"] == -1).all()
    assert res.report["unfinished_ranges_dropped"] == 4
    # dp_rank / stage from pg_config: rank = stage * dp + dp_rank
    cells = df.groupby("rank")[["dp_rank", "stage"]].first()
    assert cells.loc[3].tolist() == [1, 1] and cells.loc[1].tolist() == [1, 0]


def test_clock_alignment_collective_auto_and_step():
    files = find_traces(str(DP2PP2))
    res = import_kineto(files)  # hosts differ -> auto = collective
    assert res.report["align"] == "collective"
    assert res.report["clock_offsets_s"] == pytest.approx({"0": 0.0, "1": -0.001, "2": -0.002,
                                                           "3": -0.003})
    opt = res.df[res.df["optype"] == "optimizer"].groupby("step")["start_ts"]
    assert (opt.max() - opt.min()).max() == pytest.approx(0.0, abs=1e-9)  # aligned
    step = import_kineto(files, align="step")
    assert step.report["clock_offsets_s"]["3"] == pytest.approx(-0.003)
    # Taken as one clock, the ranks' 1-3 ms offsets put recvs before their sends.
    with pytest.raises(InputError, match="not on one clock.*aligned by `none`.*--align "
                                         "collective"):
        import_kineto(files, align="none")


def test_auto_align_one_host_trusts_clocks(tmp_path):
    docs = _docs(skew_us=0.0)
    for d in docs.values():
        d["host_name"] = "same"
    res = import_kineto(_files(tmp_path, docs))
    assert res.report["align"] == "none"
    assert set(res.report["clock_offsets_s"].values()) == {0.0}


@pytest.mark.parametrize("skewed", [True, False])
def test_auto_align_without_host_names_tests_one_clock_on_the_collective(tmp_path, skewed):
    """No host named (torch 2.11's CPU traces): one clock where the clip all-reduce's
    members end together on it, else aligned on it (the fixture's ranks run `rank` ms
    ahead)."""
    docs = _docs()
    for r, d in docs.items():
        del d["host_name"]
        if not skewed:
            for e in d["traceEvents"]:
                e["ts"] -= 1000.0 * r
    res = import_kineto(_files(tmp_path, docs))
    offsets = res.report["clock_offsets_s"]
    if skewed:
        assert res.report["align"] == "collective"
        assert offsets == pytest.approx({"0": 0.0, "1": -0.001, "2": -0.002, "3": -0.003})
    else:
        assert res.report["align"] == "none" and set(offsets.values()) == {0.0}


def test_layout_flag_megatron_order(tmp_path):
    res = import_kineto(_files(tmp_path, _docs(pg=False)), layout=Layout.parse("dp=2,pp=2"))
    cells = res.df.groupby("rank")[["dp_rank", "stage"]].first()
    assert cells.loc[2].tolist() == [0, 1]
    assert Layout.parse("dp=2,pp=2,tp=2").coords(5) == (0, 1, 1)  # (stage*dp+dp_rank)*tp+tp


def test_layout_flag_bad_and_wrong_size(tmp_path):
    with pytest.raises(InputError, match="dp=N,pp=M"):
        Layout.parse("dp=2,pipeline=2")
    with pytest.raises(InputError, match="world_size is 4"):
        import_kineto(_files(tmp_path, _docs()), layout=Layout.parse("dp=4,pp=2"))


def test_no_process_groups_needs_layout(tmp_path):
    with pytest.raises(InputError, match="--layout"):
        import_kineto(_files(tmp_path, _docs(pg=False)))


def test_error_missing_distributed_info(tmp_path):
    docs = _docs()
    del docs[1]["distributedInfo"]
    with pytest.raises(InputError, match="distributedInfo") as e:
        import_kineto(_files(tmp_path, docs))
    assert "rank1.json" in str(e.value)


def test_error_missing_ranks_and_allow_partial(tmp_path):
    docs = _docs()
    del docs[3]  # (dp_rank 1, stage 1)
    files = _files(tmp_path, docs)
    with pytest.raises(InputError, match=r"missing ranks.*dp_rank 1, stage 1"):
        import_kineto(files)
    res = import_kineto(files, allow_partial=True)  # keeps the complete DP replica 0
    # ranks 0 and 2 of the job, numbered 0 and 1 in the kept world of 2 (readable by whatif)
    assert res.meta.dp_size == 1 and sorted(res.df["rank"].unique()) == [0, 1]
    assert res.report["kept_ranks"] == {"0": 0, "1": 2}


def test_error_missing_steps_and_allow_partial(tmp_path):
    docs = _docs()
    docs[2] = rank_doc(2, steps=(3,))
    files = _files(tmp_path, docs)
    with pytest.raises(InputError, match=r"rank 2 lacks \[4\].*--allow-partial"):
        import_kineto(files)
    assert import_kineto(files, allow_partial=True).report["steps"] == [3]


def test_error_no_steps(tmp_path):
    docs = _docs()
    docs[0]["traceEvents"] = [e for e in docs[0]["traceEvents"]
                              if not e.get("name", "").startswith("ProfilerStep")]
    with pytest.raises(InputError, match="ProfilerStep"):
        import_kineto(_files(tmp_path, docs))


def test_error_unknown_names(tmp_path):
    docs = _docs()
    for e in docs[0]["traceEvents"]:
        if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep"):
            e["name"] = "my_forward"
    with pytest.raises(InputError, match="no record_function ranges named like the op vocab"):
        import_kineto(_files(tmp_path, docs))


def test_error_truncated_json_and_gzip(tmp_path):
    files = _files(tmp_path, _docs())
    files[1].write_text(files[1].read_text()[:300])
    with pytest.raises(InputError, match="not valid JSON, probably truncated") as e:
        import_kineto(files)
    assert "rank1.json" in str(e.value)
    gz = write(rank_doc(1), tmp_path / "gz" / "rank1.json.gz")
    gz.write_bytes(gz.read_bytes()[:100])
    with pytest.raises(InputError, match="gzip data is truncated"):
        import_kineto([gz])


def test_error_clock_gap(tmp_path):
    docs = _docs()
    for e in docs[3]["traceEvents"]:  # rank 3's step 4 runs 6 ms late on its clock
        if e.get("ph") == "X" and 1_040_000 <= e["ts"] < 1_060_000:
            e["ts"] += 6000
    with pytest.raises(InputError, match="clock gap.*rank 3's step 4"):
        import_kineto(_files(tmp_path, docs), align="step")


def test_error_no_trace_files(tmp_path):
    with pytest.raises(InputError, match="no trace files"):
        find_traces(str(tmp_path))


def test_comm_fallback_for_unannotated_optype(tmp_path):
    docs = {r: rank_doc(r, dp=1, pp=1) for r in range(1)}
    ev = docs[0]["traceEvents"]
    ranged = [e for e in ev if e.get("name") == "grads-reduce-scatter"]
    ev[:] = [e for e in ev if e.get("name") != "grads-reduce-scatter"]
    for e in ranged:  # every step's reduce-scatter, recorded by torch only
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                   "tid": 1, "ts": e["ts"], "dur": e["dur"],
                   "args": {"Collective name": "reduce_scatter"}})
    # an all-reduce record inside the clip range is the clip's own: not a separate op
    clip = next(e for e in ev if e.get("name") == "optimizer-clip-main-grad")
    ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
               "ts": clip["ts"] + 100.0, "dur": 50.0, "args": {"Collective name": "allreduce"}})
    res = import_kineto(_files(tmp_path, docs))
    assert (res.df["optype"] == "grads-reduce-scatter").sum() == len(ranged) >= 2
    assert (res.df["optype"] == "separate-grads-all-reduce").sum() == 0


def test_cli_writes_outputs_and_reports_offsets(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["import", "kineto", "--traces", str(DP2PP2), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "clock alignment (collective)" in text and "rank 3 -1.000 ms" not in text
    df, meta = read_trace(out / "trace.parquet", out / "meta.yaml")
    assert meta.pp_size == 2 and len(df) == 96
    report = json.loads((out / "import.json").read_text())
    assert report["schema"] == "stragglerlab.import/1"
    assert report["clock_offsets_s"]["3"] == pytest.approx(-0.003)


def test_cli_bad_input_exit_2(tmp_path, capsys):
    code = main(["import", "kineto", "--traces", str(tmp_path / "nothing*"), "--out",
                 str(tmp_path / "o")])
    assert code == 2
    assert "no trace files" in capsys.readouterr().err


def test_gpu_timing_from_gpu_annotations(tmp_path):
    docs = _docs()
    for d in docs.values():
        extra = []
        for i, e in enumerate(d["traceEvents"]):
            if e.get("name") == "forward-compute" and e["dur"] == 800:
                e["args"]["External id"] = i
                extra.append({**e, "cat": "gpu_user_annotation", "tid": 7, "ts": e["ts"] + 50,
                              "dur": 500.0, "args": {"External id": i}})
        extra.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                      "ts": 1_030_500.0, "dur": 10.0, "args": {}})
        d["traceEvents"] += extra
    files = _files(tmp_path, docs)
    res = import_kineto(files)  # auto: the traces hold kernels
    fwd = res.df[res.df["optype"] == "forward-compute"]
    assert res.report["timing"] == "gpu" and fwd["duration"].tolist() == pytest.approx(
        [500e-6] * len(fwd))
    cpu = import_kineto(files, timing="cpu").df
    assert cpu[cpu["optype"] == "forward-compute"]["duration"].max() == pytest.approx(800e-6)
    with pytest.raises(InputError, match="no GPU kernels"):
        import_kineto(find_traces(str(DP2PP2)), timing="gpu")


def test_a_folder_of_rank_subfolders_is_searched(tmp_path):
    for r in (0, 1):
        (tmp_path / f"worker{r}").mkdir()
        (tmp_path / f"worker{r}" / f"rank{r}.pt.trace.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    assert [f.parent.name for f in find_traces(str(tmp_path))] == ["worker0", "worker1"]
    (tmp_path / "top.json").write_text("{}")  # top-level traces: the subfolders are not read
    assert [f.name for f in find_traces(str(tmp_path))] == ["top.json"]


def test_several_files_folders_and_globs_are_pooled(tmp_path):
    # `--traces run/rank*.json` in a shell gives one argument per file.
    every = find_traces(str(DP2PP2))
    assert find_traces([str(f) for f in every]) == every
    assert find_traces([str(every[0]), str(DP2PP2 / "rank[123]*")]) == every
    assert find_traces([str(DP2PP2)]) == every  # one spec: as before
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(InputError, match="not named like a trace file"):
        find_traces([str(every[0]), str(tmp_path / "notes.txt")])
    with pytest.raises(InputError, match="no trace files"):
        find_traces([str(every[0]), str(tmp_path / "rank9.json")])


def test_cli_takes_the_rank_files_a_shell_glob_expands_to(tmp_path, capsys):
    files = [str(f) for f in find_traces(str(DP2PP2))]
    out = tmp_path / "imported"
    assert main(["import", "kineto", "--traces", *files, "--out", str(out)]) == 0
    assert (out / "trace.parquet").is_file()
    by_folder = tmp_path / "by-folder"
    assert main(["import", "kineto", "--traces", str(DP2PP2), "--out", str(by_folder)]) == 0
    assert read_trace(out / "trace.parquet")[0].equals(read_trace(by_folder / "trace.parquet")[0])


def test_error_complete_event_without_dur(tmp_path):
    # A complete event with no dur is malformed, not an op that took no time.
    docs = _docs()
    fwd = next(e for e in docs[1]["traceEvents"] if e.get("name") == "forward-compute")
    del fwd["dur"]
    with pytest.raises(InputError, match="dur is missing"):
        import_kineto(_files(tmp_path, docs))


def test_error_ranges_left_out_make_the_import_fail_not_the_whatif(tmp_path):
    # Ranges that are not complete events are left out; the merged trace then lacks ops,
    # which the import says, naming the rank traces, instead of writing a trace that only
    # the what-if would refuse.
    docs = _docs()
    for fwd in [e for e in docs[1]["traceEvents"] if e.get("name") == "forward-compute"][-2:]:
        fwd["ph"] = "B"  # the last microbatch's forward range (and the one nested in it)
    with pytest.raises(InputError, match="do not merge into a trace the what-if can read"):
        import_kineto(_files(tmp_path, docs))


def test_layout_flag_contradicting_the_process_groups_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"contradicts the traces' process groups"):
        import_kineto(_files(tmp_path, _docs()), layout=Layout.parse("dp=4,pp=1"))
    # where the groups tell the same layout, --layout is accepted
    assert import_kineto(_files(tmp_path, _docs()), layout=Layout.parse("dp=2,pp=2")).meta \
        .pp_size == 2


def test_process_groups_of_different_jobs_are_refused(tmp_path):
    docs = _docs()
    dp_group = next(g for g in docs[0]["distributedInfo"]["pg_config"]
                    if g["pg_desc"] == "DATA_PARALLEL_GROUP")
    dp_group["ranks"] = [0, 2]  # rank 0 says its DP peer is 2; rank 1 says it is 0's peer
    with pytest.raises(InputError, match="not one job's"):
        import_kineto(_files(tmp_path, docs))
