"""One what-if result: every whatif.json either model writes, old files included, reads into
one WhatIfSummary (stragglerlab.run.whatif_reader), with the same names and units; a bad file is
one error saying how to rewrite it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import stragglerlab.api
from stragglerlab.analysis.whatif import analyze
from stragglerlab.cli import main
from stragglerlab.figures.job_pictures import job_series
from stragglerlab.run.whatif_reader import read_whatif_summary, summary_of_document
from stragglerlab.run.whatif_summary import SUMMARY_KEY, WhatIfModel, WhatIfSummary
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.util.errors import InputError
from tests.unit.general_fixtures import ddp_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slow-worker"
V0 = ROOT / "tests" / "data" / "run_folder_v0"
GENERAL_S = 27.0 / 19.5  # general_fixtures: a 2x slow rank 3 of 4
SCALARS = ("S", "waste", "T_s", "T_ideal_s", "traced_step_s", "discrepancy", "straggling",
           "M_W", "M_S", "by_kind", "by_part", "by_dp_rank", "by_stage", "by_rank",
           "top_workers", "regime_change", "fwd_bwd_correlation", "host_model",
           "compute_ideal", "model")
"""Fields compared whole between two summaries of one result."""


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory) -> Path:
    """The slow-worker example's whatif.json, as `stragglerlab whatif` writes it."""
    out = tmp_path_factory.mktemp("vocabulary")
    assert main(["whatif", "--run", str(EXAMPLE), "--out", str(out), "--quiet"]) == 0
    return out / "whatif.json"


@pytest.fixture(scope="module")
def general(tmp_path_factory) -> Path:
    """An unannotated import of a DP 4 job whose rank 3 computes 2x slower."""
    tmp = tmp_path_factory.mktemp("general")
    traces = ddp_job(tmp / "traces", slow={3: 2.0}, steps=(5, 6, 7))
    out = tmp / "imported"
    assert main(["import", "kineto", "--traces", str(traces), "--out", str(out), "--quiet",
                 "--layout", "dp=4,pp=1"]) == 0
    return out


def _same(a: WhatIfSummary, b: WhatIfSummary, rel: float = 0.0) -> None:
    for name in SCALARS:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, float) and rel:
            assert x == pytest.approx(y, rel=rel), name
        else:
            assert x == y, name
    assert a.validity.to_dict() == b.validity.to_dict()
    for part, columns in (("workers", ("rank", "dp_rank", "stage", "s")),
                          ("steps", ("step", "s", "traced_s", "t_s", "t_ideal_s"))):
        for c in columns:
            x, y = getattr(getattr(a, part), c), getattr(getattr(b, part), c)
            np.testing.assert_allclose(x, y, rtol=rel or 1e-15, atol=0, err_msg=f"{part}.{c}")


def _without_block(path: Path) -> dict:
    doc = json.loads(path.read_text())
    del doc[SUMMARY_KEY]
    return doc


def test_the_vocabulary_file_holds_the_results_own_numbers(vocabulary):
    df, meta = read_trace(EXAMPLE / "trace.parquet", EXAMPLE / "meta.yaml")
    result = analyze(df, meta, where=str(EXAMPLE))
    read = read_whatif_summary(vocabulary)
    assert read.model is WhatIfModel.VOCABULARY and read.path == str(vocabulary)
    _same(read, result.summary())
    doc = json.loads(vocabulary.read_text())
    # The block beside the fields it summarises, in their units.
    assert read.S == doc["slowdown"] and read.discrepancy == doc["simulation_discrepancy"] - 1
    assert read.T_s == doc["t_nodelay_s"] and read.traced_step_s == doc["t_actual_s"]
    assert read.workers.grid().tolist() == doc["worker_score"]
    assert read.workers.grid()[1, 1] == read.workers.s.max()  # the example's slowed worker
    assert read.top_workers == [1 * 2 + 1]  # (DP 1, stage 1) of DP 2


def test_a_vocabulary_file_before_the_block_reads_the_same(vocabulary):
    old = summary_of_document(_without_block(vocabulary), str(vocabulary))
    _same(old, read_whatif_summary(vocabulary), rel=1e-12)  # T_ideal per step: T / S


def test_another_compute_ideal_is_read_from_its_block(vocabulary):
    doc = json.loads(vocabulary.read_text())
    median = read_whatif_summary(vocabulary, "median")
    block = doc["compute_ideals"]["median"]
    assert median.compute_ideal == "median" and median.S == block["slowdown"]
    assert median.workers.grid().tolist() == block["worker_score"]
    assert median.steps.t_s.tolist() == [doc["step_time_nodelay_s"][str(s)]
                                        for s in doc["steps"]]


def test_the_general_file_reads_into_the_same_names(general):
    read = read_whatif_summary(general)  # the folder: its whatif.json
    doc = json.loads((general / "whatif.json").read_text())
    assert read.model is WhatIfModel.GENERAL
    assert read.S == doc["S"] == pytest.approx(GENERAL_S)
    assert read.discrepancy == doc["discrepancy"] and read.T_s == doc["T"]
    assert read.by_rank == {int(k): v for k, v in doc["by_rank"].items()}
    assert read.workers.grid().shape == (1, 4) and int(np.argmax(read.workers.grid())) == 3
    assert read.steps.step.tolist() == [5, 6, 7]
    assert read.steps.t_s / read.steps.t_ideal_s == pytest.approx(read.steps.s)
    # The block, the file's own fields, and both summaries' JSON share one set of names.
    old = summary_of_document(_without_block(general / "whatif.json"),
                              str(general / "whatif.json"))
    _same(old, read)
    assert set(read.to_json()) == set(doc[SUMMARY_KEY])


def test_both_blocks_have_one_schema(vocabulary, general):
    a = json.loads(vocabulary.read_text())[SUMMARY_KEY]
    b = json.loads((general / "whatif.json").read_text())[SUMMARY_KEY]
    assert list(a) == list(b)
    assert list(a["workers"]) == list(b["workers"]) and list(a["steps"]) == list(b["steps"])
    assert (a["model"], b["model"]) == ("vocabulary", "general")


def test_a_general_file_written_before_the_step_times_reads_and_plot_says_how(
        general, tmp_path, capsys):
    """The first general whatif.json: no summary, per-step times, compute ideal, gate or
    worker_coords. It still reads; the pictures, which draw the step times, say how to
    rewrite it."""
    old = tmp_path / "old"
    shutil.copytree(general, old)
    doc = json.loads((old / "whatif.json").read_text())
    for key in (SUMMARY_KEY, "step_time_actual_s", "step_time_simulated_s",
                "step_time_ideal_s", "compute_ideal", "validity", "worker_coords",
                "entry_skew_s", "by_segment_part", "gpu_busy_share", "regime_change",
                "host_model"):
        doc.pop(key)
    (old / "whatif.json").write_text(json.dumps(doc))
    s = read_whatif_summary(old)
    assert s.S == pytest.approx(GENERAL_S) and s.compute_ideal == "mean"
    assert s.validity.valid and s.straggling is True  # the gate its discrepancy gives
    assert not s.steps.has_times and s.steps.s == pytest.approx([GENERAL_S] * 3)
    assert not s.workers.has_layout
    assert main(["plot", "--run", str(old), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "per-step times" in err and f"stragglerlab whatif --run {old}" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_layout_before_schema_versions_reads():
    s = read_whatif_summary(V0)  # a run folder: its whatif/whatif.json
    assert s.model is WhatIfModel.VOCABULARY and s.S == 1.25
    assert s.discrepancy == pytest.approx(0.01) and s.straggling is True
    assert s.workers.grid().tolist() == [[1.0, 1.0], [1.0, 1.25]] and s.top_workers == [3]
    assert s.steps.step.tolist() == [1, 2] and s.M_W == 0.8
    assert not s.steps.has_times  # it never recorded the simulated step times
    with pytest.raises(InputError, match="mean compute ideal only"):
        read_whatif_summary(V0, "median")


@pytest.mark.parametrize("damage, needle", [
    (lambda d: d.update(schema="stragglerlab.whatif/1"), r"schema: is 'stragglerlab.whatif/1'"),
    (lambda d: d.update(schema="stragglerlab.whatif-general/2"), r"schema: is 'stragglerlab\."
                                                                  r"whatif-general/2'"),
    (lambda d: d[SUMMARY_KEY].update(S=d[SUMMARY_KEY]["S"] * 1.5), r"summary\.S: is .* the "
                                                                      r"file's own field says"),
    (lambda d: d[SUMMARY_KEY].update(schema="stragglerlab.whatif-summary/9"),
     r"summary\.schema"),
    (lambda d: d[SUMMARY_KEY]["workers"].update(S=[1.0]), r"summary\.workers\.S: has 1 "
                                                          "entries"),
    (lambda d: d[SUMMARY_KEY]["steps"].update(T_s=["x"] * 8), r"summary\.steps\.T_s\[0\]: "
                                                               "expected a number"),
    (lambda d: d[SUMMARY_KEY].update(model="other"), r"summary\.model"),
])
def test_a_bad_file_is_one_error_with_the_fix(vocabulary, tmp_path, damage, needle):
    doc = json.loads(vocabulary.read_text())
    damage(doc)
    path = tmp_path / "whatif.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        read_whatif_summary(path)
    message = str(err.value)
    assert re.search(needle, message), message
    assert "stragglerlab whatif --run" in message and "\n" not in message


def test_a_folder_without_a_result_says_what_to_run(tmp_path):
    with pytest.raises(InputError, match=r"run `stragglerlab whatif --run .*` first"):
        read_whatif_summary(tmp_path)
    (tmp_path / "whatif.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="expected an object"):
        read_whatif_summary(tmp_path)


def test_the_api_summarises_any_whatif_json(vocabulary, general):
    job = stragglerlab.open(EXAMPLE)
    mine = job.summary()
    theirs = stragglerlab.api.summary(vocabulary)
    assert list(mine.index) == list(theirs.index)
    assert mine.drop("model").to_dict() == theirs.drop("model").to_dict()
    g = stragglerlab.api.summary(general)
    assert list(g.index) == list(mine.index) and g["model"] == "general"
    assert g["slowdown"] == pytest.approx(GENERAL_S) and g["workers"] == 4
    assert g["fwd_bwd_correlation"] is None and g["straggling"] is True


def test_the_pictures_take_either_models_summary(vocabulary, general):
    for path in (vocabulary, general):
        js = job_series(read_whatif_summary(path))
        assert js.step_time_simulated_s / js.step_time_ideal_s == pytest.approx(
            js.step_slowdown)
    with pytest.raises(TypeError, match="WhatIfSummary"):
        job_series(json.loads(vocabulary.read_text()))


def test_the_docs_table_names_every_field_of_the_block(vocabulary):
    text = (ROOT / "docs" / "whatif.md").read_text()
    section = text[text.index("## The summary"):]
    section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
    block = json.loads(vocabulary.read_text())[SUMMARY_KEY]
    named = {name for line in section.splitlines() if line.startswith("| `")
             for name in re.findall(r"`([^`]+)`", line.split("|")[1])}
    fields = set(block) | {f"workers.{k}" for k in block["workers"]} | {
        f"steps.{k}" for k in block["steps"]}
    assert fields <= named, sorted(fields - named)


CONSUMERS = ("figures/job_pictures.py", "figures/fig14_heatmaps.py", "stragglerlab/api.py",
             "stragglerlab/cli/plot.py", "stragglerlab/cli/detect.py",
             "stragglerlab/monitor/window.py", "analysis/general_findings.py")
"""Modules that take a what-if result: they read it as a WhatIfSummary."""


@pytest.mark.parametrize("module", CONSUMERS)
def test_the_consumers_take_the_summary_not_a_record_kind(module):
    text = (ROOT / module).read_text()
    for kind in ("WhatIfRecord", "GENERAL_WHATIF_SCHEMA", "validity_of(", '["S"]',
                 '["slowdown"]', '"simulation_discrepancy"]'):
        assert kind not in text, f"{module} reads a what-if result by its kind ({kind})"
    assert "WhatIfSummary" in text or "read_whatif_summary" in text
