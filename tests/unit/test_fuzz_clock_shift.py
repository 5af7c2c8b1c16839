"""Bad inputs found by a fuzz round (classes of mistakes, not one case each): a worker's
clock shifted by less than a step, and the other silent acceptances that round found."""

from __future__ import annotations

from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.importers.kineto import import_kineto
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.trace.trace_io import write_trace
from stragglerlab.util.errors import InputError
from tests.unit.kineto_fixtures import rank_doc, write
from tests.unit.monitor_helpers import synth
from tests.unit.refdata import REFERENCE


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A finished 4-step DP 2 x PP 2 synth run (trace.parquet, meta.yaml)."""
    return synth(tmp_path_factory.mktemp("s54") / "src", "--steps", "4")


@pytest.mark.parametrize("shift_steps", [0.3, -0.3])
def test_a_worker_clock_shifted_inside_the_step_is_refused(tmp_path, src, capsys, shift_steps):
    """One worker's start_ts off by a third of a step: its spans still overlap the others'
    (the one-clock check passes), but some recvs now end before their sends start, and the
    what-if read the shift as waiting (S 1.23 -> 1.71, the wrong top worker)."""
    folder = RunFolder(path=src)
    df = folder.trace().copy()
    end = df["start_ts"] + df["duration"]
    span = (end.groupby(df["step"]).max() - df.groupby("step")["start_ts"].min()).median()
    df.loc[(df["dp_rank"] == 1) & (df["stage"] == 1), "start_ts"] += shift_steps * span
    write_trace(df, folder.meta, tmp_path / "trace.parquet")
    code = main(["whatif", "--trace", str(tmp_path / "trace.parquet"), "--meta",
                 str(src / "meta.yaml"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "P2P recv" in err and "before its send" in err and "one clock" in err


def test_the_unshifted_trace_passes(tmp_path, src):
    assert main(["whatif", "--run", str(src), "--out", str(tmp_path), "--quiet"]) == 0


def _rank0_renamed(tmp_path, old: str, new: str) -> list:
    docs = {r: rank_doc(r) for r in range(4)}
    for e in docs[0]["traceEvents"]:
        if e.get("name") == old:
            e["name"] = new
    return [write(d, tmp_path / f"rank{r}.json") for r, d in docs.items()]


@pytest.mark.parametrize("new", ["Optimizer", " optimizer ", "OPTIMIZER"])
def test_a_vocabulary_name_misspelt_by_case_or_spaces_is_read_with_a_note(tmp_path, new):
    """'Optimizer' on one rank was dropped without a word: the import wrote a trace the
    what-if then refused (an op missing from one DP rank)."""
    res = import_kineto(_rank0_renamed(tmp_path, "optimizer", new))
    assert (res.df["optype"] == "optimizer").sum() == 4 * 2  # every rank, both steps
    # 3 ranges: one per step and the fixture's never-closed one (then left out)
    assert res.report["respelled_ranges"][new] == {"optype": "optimizer", "count": 3,
                                                   "ranks": [0]}


def test_underscores_for_hyphens_are_read_too(tmp_path):
    res = import_kineto(_rank0_renamed(tmp_path, "forward-compute", "forward_compute"))
    assert res.report["respelled_ranges"]["forward_compute"]["optype"] == "forward-compute"


def test_an_op_type_one_dp_rank_lacks_is_refused_at_import(tmp_path):
    """A name that is not the vocabulary's ('optimiser') leaves rank 0 without the op:
    refused at the import, naming the worker and op type, not later by the what-if."""
    with pytest.raises(InputError, match=r"\(dp_rank 1, stage 0\) traces 1 'optimizer'.*"
                                         r"\(dp_rank 0, stage 0\) traces 0"):
        import_kineto(_rank0_renamed(tmp_path, "optimizer", "optimiser"))


@pytest.mark.parametrize("name", ["ProfilerStep#two", "ProfilerStep#-1", "ProfilerStep#4 "])
def test_a_step_range_whose_number_is_not_one_is_refused(tmp_path, name):
    """Such a step was dropped without a word: the import read steps 3 and 5 of 3..5."""
    docs = {r: rank_doc(r, steps=(3, 4, 5)) for r in range(4)}
    for e in docs[1]["traceEvents"]:
        if e.get("name") == "ProfilerStep#4":
            e["name"] = name
    files = [write(d, tmp_path / f"rank{r}.json") for r, d in docs.items()]
    with pytest.raises(InputError, match="torch names each step ProfilerStep#<n>"):
        import_kineto(files)
    from stragglerlab.importers.kineto_events import read_rank
    with pytest.raises(InputError, match="torch names each step ProfilerStep#<n>"):
        read_rank(files[1])


@pytest.mark.parametrize("steps", [[0, 0, 1, 2], [0, 1], [3, 2, 1, 0]])
def test_a_whatif_json_whose_steps_disagree_with_its_tables_is_refused(tmp_path, src, steps):
    """plot drew step 0 twice (or two steps of four) from such a file, exit 0."""
    import json

    assert main(["whatif", "--run", str(src), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "w" / "whatif.json").read_text())
    assert doc["steps"] == [0, 1, 2, 3]
    (tmp_path / "bad.json").write_text(json.dumps(dict(doc, steps=steps)))
    from stragglerlab.run.whatif_record import WhatIfRecord
    with pytest.raises(InputError, match="steps"):
        WhatIfRecord.read(tmp_path / "bad.json")
    assert main(["plot", "--whatif", str(tmp_path / "bad.json"), "--out",
                 str(tmp_path / "p"), "--quiet"]) == 2


@pytest.mark.parametrize("kind", ["findings", "run", "scores", "figure"])
def test_a_record_of_another_schema_version_is_refused(tmp_path, kind):
    """Each reader took `<family>/9` for `<family>/1`: score counted such findings (F1 1.0),
    detect and figures read such a run.json. Every versioned record now names the one
    version it reads."""
    from stragglerlab.util.filecheck import Checker
    chk = Checker(tmp_path / "x.json", "rewrite it")
    current = {"findings": "stragglerlab.findings/1", "run": "stragglerlab.run/1",
               "scores": "stragglerlab.scores/1", "figure": "stragglerlab.figure/1"}[kind]
    assert chk.schema(current, current, kind) == current
    newer = current[:-1] + "9"
    with pytest.raises(InputError, match=r"version this stragglerlab does not read.*"
                                         + current.replace(".", r"\.")):
        chk.schema(newer, current, kind)
    with pytest.raises(InputError, match="is not a"):
        chk.schema("stragglerlab.other/1", current, kind)


def test_score_refuses_findings_of_a_newer_schema(tmp_path, src, capsys):
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(src, run)
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert main(["detect", "--run", str(run), "--quiet"]) == 0
    path = run / "detect" / "whatif.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()),
                                    schema="stragglerlab.findings/9")))
    capsys.readouterr()
    assert main(["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                 "--out", str(tmp_path / "s"), "--quiet"]) == 2
    assert "findings/9" in capsys.readouterr().err


def test_ctrl_c_while_the_verbs_load_is_one_line(monkeypatch, capsys):
    """Ctrl-C while the verb's module loads (build_parser imports it) printed a
    KeyboardInterrupt traceback."""
    import stragglerlab.cli as cli

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["whatif", "--run", "x"]) == 130
    err = capsys.readouterr().err
    assert err == "stragglerlab: interrupted\n"


def test_noise_floor_refuses_a_straggling_run_taken_as_clean(tmp_path, capsys):
    """A run folder with no faults.json was taken as clean; a straggling one (S 1.23)
    became the floor and raised detect's thresholds (compute_ratio 1.1 -> 2)."""
    run = synth(tmp_path / "run", "--steps", "4", "--slow", "1,1,2.0")
    (run / "faults.json").unlink()
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["noise-floor", "--runs", str(run), "--out", str(tmp_path / "f"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "straggling" in err and "no faults.json" in err
    assert not (tmp_path / "f" / "noise-floor.yaml").exists()


def test_fig14_refuses_a_reference_whatif_of_another_job(tmp_path, src, capsys):
    """Another job's whatif.json as trace-AR's: a TypeError traceback, and heatmaps left
    in --out without their JSON."""
    assert main(["whatif", "--run", str(src), "--out", str(tmp_path / "rw" / "AR"),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["figures", "--reference", str(REFERENCE), "--reference-whatif",
                 str(tmp_path / "rw"), "--only", "fig14_heatmaps", "--out",
                 str(tmp_path / "fig"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "meta-AR.yaml says DP 4 x PP 4" in err and "Traceback" not in err
    assert not list(tmp_path.glob("fig/*.png"))  # refused before any panel is drawn


def test_a_reader_that_leaves_early_never_makes_a_silent_failure(src):
    """`whatif ... | head -1` exited 1 about half the time with nothing on stderr: a flush
    after the broken write succeeded, which read as "stderr broke"."""
    import subprocess
    import sys

    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-m", "stragglerlab", "whatif", "--run",
                                 str(src), "--out", str(src / "w")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.readline()
        proc.stdout.close()  # the reader leaves after one line
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 0, err
        assert b"Traceback" not in err


def test_a_refused_monitor_pass_prints_no_success_summary(tmp_path, src, capsys):
    """It printed "0 window(s) analysed ... -> monitor/windows.jsonl", a file it never
    wrote, before its error."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(src, run)
    capsys.readouterr()
    assert main(["monitor", "--run", str(run), "--once", "--no-serve", "--warmup-steps",
                 "1000", "--quiet"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "--warmup-steps 1000 leaves out every step" in out.err


@pytest.mark.parametrize(("text", "read_as"), [("010", 8), ("012", 10), ("-07", -7),
                                                ("1:30", 90)])
def test_yaml_1_1_octal_and_base_60_integers_are_refused(text, read_as):
    """`dp_size: 010` was read as 8 (the error then named dp_size=8), `012` silently as 10."""
    from stragglerlab.util.filecheck import parse_yaml

    with pytest.raises(InputError, match=f"reads as {read_as} in YAML 1.1"):
        parse_yaml(f"dp_size: {text}\n", "meta.yaml", "job meta", "fix it")


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("10", 10), ("0x1f", 31),
                                             ("1_000", 1000), ("'010'", "010"), ("0.5", 0.5)])
def test_plain_yaml_numbers_still_read(text, value):
    from stragglerlab.util.filecheck import parse_yaml

    assert parse_yaml(f"a: {text}\n", "x.yaml", "x", "fix") == {"a": value}


DDP = Path(__file__).resolve().parents[2] / "examples" / "torch-ddp" / "kineto"


@pytest.fixture(scope="module")
def ddp_import(tmp_path_factory):
    """The torch-ddp example imported with the general op model (ops.parquet)."""
    out = tmp_path_factory.mktemp("ddp") / "imp"
    assert main(["import", "kineto", "--traces", str(DDP), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.mark.parametrize("edit", ["negative-first-gap", "steps-apart"])
def test_an_op_table_edited_out_of_its_contract_is_refused(tmp_path, ddp_import, capsys,
                                                           edit):
    """A step's first op with a negative gap_s read S 1.36 -> 1.44; rank 1's steps
    renumbered (no step shared) read S 1.00 with a 36 % discrepancy. Both exit 0."""
    import shutil

    import pandas as pd

    run = tmp_path / "run"
    shutil.copytree(ddp_import, run)
    ops = pd.read_parquet(run / "ops.parquet")
    if edit == "negative-first-gap":
        ops.loc[ops.index[ops["k"] == 0][1], "gap_s"] = -1.0
    else:
        ops.loc[ops["rank"] == 1, "step"] += 100
    ops.to_parquet(run / "ops.parquet", index=False)
    capsys.readouterr()
    assert main(["whatif", "--run", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert ("negative gap_s" if edit == "negative-first-gap" else "other steps on rank 1") in err


def test_a_collective_longer_than_its_step_is_noted(tmp_path, capsys):
    """One gloo all-reduce made 5 s long in a ~1 s step moved S 1.36 -> 1.69, no note."""
    import gzip
    import json

    for r in range(2):
        doc = json.loads(gzip.open(DDP / f"rank{r}.json.gz").read())
        if r == 0:
            next(e for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce")["dur"] = 5e6
        (tmp_path / "k").mkdir(exist_ok=True)
        (tmp_path / "k" / f"rank{r}.json").write_text(json.dumps(doc))
    assert main(["import", "kineto", "--traces", str(tmp_path / "k"), "--out",
                 str(tmp_path / "imp"), "--quiet"]) == 0
    assert "last longer than their whole step" in capsys.readouterr().out


def test_a_trace_gzipped_twice_is_named(tmp_path):
    import gzip

    from stragglerlab.importers.kineto_events import read_rank

    doc = rank_doc(0)
    once = tmp_path / "once.json.gz"
    write(doc, once)
    twice = tmp_path / "rank0.json.gz"
    twice.write_bytes(gzip.compress(once.read_bytes()))
    for read in (read_rank, lambda p: read_rank(p, vocabulary=True)):
        with pytest.raises(InputError, match="compressed twice"):
            read(twice)


def test_a_number_in_quotes_in_a_json_file_gets_a_json_hint(tmp_path):
    """The hint spoke of YAML 1.1 for a JSON file."""
    from stragglerlab.util.filecheck import Checker

    with pytest.raises(InputError, match="a number in quotes") as e:
        Checker(tmp_path / "whatif.json", "fix").number("1.25", "slowdown")
    assert "YAML" not in str(e.value)
    with pytest.raises(InputError, match="YAML 1.1"):
        Checker(tmp_path / "meta.yaml", "fix").number("1e-3", "x")


def test_m_w_and_m_s_outside_the_unit_interval_are_explained(tmp_path, capsys):
    """The README's own example printed M_W 1.325 and M_S -0.067 as plain shares."""
    example = Path(__file__).resolve().parents[2] / "examples" / "slow-worker"
    assert main(["whatif", "--run", str(example), "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "M_W 1.325 > 1: idealizing those ops alone gives" in out
    assert "M_S -0.067 < 0" in out


def test_report_refuses_a_figure_result_named_otherwise_than_its_file(tmp_path):
    import json

    from stragglerlab.figures.report import _figure_entry

    doc = {"schema": "stragglerlab.figure/1", "name": "fig99_other", "paths": []}
    path = tmp_path / "fig03_waste_cdf.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="named after its file"):
        _figure_entry(path, doc)
    assert _figure_entry(path, dict(doc, name="fig03_waste_cdf")).name == "fig03_waste_cdf"


def test_online_findings_in_the_offline_file_are_refused(tmp_path, src):
    """A findings file saying online: true where score reads the offline ones was scored
    as offline."""
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(src, run)
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert main(["detect", "--run", str(run), "--quiet"]) == 0
    path = run / "detect" / "whatif.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), online=True)))
    with pytest.raises(InputError, match="online: is true, but this file holds a whole run"):
        RunFolder(path=run).findings("whatif")
