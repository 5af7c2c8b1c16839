"""What a newcomer does after importing unannotated traces (the general op model): `whatif`,
`plot` and `detect` on the folder `import kineto` wrote (ops.parquet, import.json,
whatif.json; no trace.parquet)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from stragglerlab.cli import main
from stragglerlab.run.general_record import is_general_import
from stragglerlab.run.whatif_reader import read_whatif_summary
from stragglerlab.run.whatif_summary import WhatIfModel
from tests.unit.general_fixtures import ddp_job

EXPECTED_S = 27.0 / 19.5  # general_fixtures: a 2x slow rank 3 of 4


def _import(tmp_path, *layout: str):
    out = tmp_path / "imported"
    traces = ddp_job(tmp_path / "traces", slow={3: 2.0}, steps=(5, 6, 7))
    assert main(["import", "kineto", "--traces", str(traces), "--out", str(out), "--quiet",
                 *layout]) == 0
    assert is_general_import(out)
    return out


@pytest.fixture
def imported(tmp_path):
    return _import(tmp_path)


def test_whatif_on_the_folder_analyses_its_op_table_again(imported, capsys):
    before = json.loads((imported / "whatif.json").read_text())
    (imported / "whatif.json").unlink()
    assert main(["whatif", "--run", str(imported), "--quiet"]) == 0
    assert "what-if: S = 1.3846" in capsys.readouterr().out
    after = json.loads((imported / "whatif.json").read_text())
    assert after == before  # the same what-if as the import's, notes included
    summary = read_whatif_summary(imported)
    assert summary.model is WhatIfModel.GENERAL and summary.S == pytest.approx(EXPECTED_S)
    assert summary.steps.step.tolist() == [5, 6, 7]
    assert summary.steps.t_s / summary.steps.t_ideal_s == pytest.approx(summary.steps.s)


def test_plot_draws_the_workers_and_the_steps(tmp_path):
    imported = _import(tmp_path, "--layout", "dp=4,pp=1")
    assert main(["plot", "--run", str(imported), "--quiet"]) == 0
    heat = json.loads((imported / "plot" / "heatmap.json").read_text())
    assert heat["hottest_worker"] == {"score": pytest.approx(EXPECTED_S), "dp_rank": 3,
                                      "stage": 0}
    assert "ranks" not in heat and len(heat["worker_score"]) == 1
    assert heat["slowdown"] == pytest.approx(EXPECTED_S)
    steps = json.loads((imported / "plot" / "step-slowdown.json").read_text())
    assert steps["steps"] == [5, 6, 7]
    assert steps["step_slowdown"] == pytest.approx([EXPECTED_S] * 3)
    assert (imported / "plot" / "heatmap.png").stat().st_size > 0


def test_without_a_layout_the_heatmap_is_one_row_of_ranks(imported):
    assert json.loads((imported / "whatif.json").read_text())["worker_coords"] == {}
    assert main(["plot", "--run", str(imported), "--quiet"]) == 0
    heat = json.loads((imported / "plot" / "heatmap.json").read_text())
    assert heat["ranks"] == [0, 1, 2, 3] and heat["hottest_worker"] == {
        "score": pytest.approx(EXPECTED_S), "rank": 3}


def test_detect_says_what_the_folder_is_and_what_to_do(imported, capsys):
    """The whatif detector reads the import's what-if (rank 3 is the slow one); the
    detectors that read the op-level trace say so and what to do."""
    assert main(["detect", "--run", str(imported), "--detector", "whatif"]) == 0
    found = json.loads((imported / "detect" / "whatif.json").read_text())["findings"]
    assert [r["rank"] for f in found for r in f["ranks"]] == [3]
    assert main(["detect", "--run", str(imported), "--detector", "rank-score"]) == 2
    err = capsys.readouterr().err
    assert "unannotated import" in err and "--detector whatif" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("damage, needle", [
    (lambda d: d.pop("step_time_ideal_s"), "step_time_ideal_s"),
    (lambda d: d.update(schema="stragglerlab.whatif/9"), "schema"),
    (lambda d: d.update(worker_coords={"0": [0], "1": [1, 0], "2": [2, 0], "3": [3, 0]}),
     "worker_coords.0"),
    (lambda d: d.update(per_step={}), "per_step"),
    (lambda d: d.update(step_time_ideal_s={"5": 0.0, "6": 0.01, "7": 0.01}),
     "step_time_ideal_s"),
])
def test_a_damaged_whatif_json_gets_one_error_naming_the_field(imported, capsys, damage,
                                                                needle):
    doc = json.loads((imported / "whatif.json").read_text())
    damage(doc)
    (imported / "whatif.json").write_text(json.dumps(doc))
    assert main(["plot", "--run", str(imported)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_flags_of_the_op_level_trace_are_refused_with_the_reason(imported, capsys):
    assert main(["whatif", "--run", str(imported), "--timelines"]) == 2
    assert "timelines" in capsys.readouterr().err


def test_the_median_ideal_is_written_and_drawn_as_written(imported, capsys):
    mean = json.loads((imported / "whatif.json").read_text())
    assert mean["compute_ideal"] == "mean"
    assert main(["whatif", "--run", str(imported), "--compute-ideal", "median"]) == 0
    assert "median compute ideal" in capsys.readouterr().out
    median = json.loads((imported / "whatif.json").read_text())
    assert median["compute_ideal"] == "median" and median["S"] >= mean["S"] - 1e-12
    assert main(["plot", "--run", str(imported), "--quiet"]) == 0  # its own ideal
    drawn = json.loads((imported / "plot" / "heatmap.json").read_text())
    assert drawn["compute_ideal"] == "median"
    # A picture of the other ideal would need the what-if again: one error saying how.
    assert main(["plot", "--run", str(imported), "--compute-ideal", "mean", "--out",
                 str(imported.parent / "p2")]) == 2
    err = capsys.readouterr().err
    assert "written with the median compute ideal" in err and "--compute-ideal mean" in err


def test_a_damaged_op_table_gets_one_error(imported, capsys):
    ops = pd.read_parquet(imported / "ops.parquet")
    ops.drop(columns=["gap_s"]).to_parquet(imported / "ops.parquet")
    assert main(["whatif", "--run", str(imported)]) == 2
    assert "gap_s" in capsys.readouterr().err
    (imported / "ops.parquet").write_bytes(b"not parquet")
    assert main(["whatif", "--run", str(imported)]) == 2
    err = capsys.readouterr().err
    assert "re-import" in err and "Traceback" not in err


def test_the_python_api_says_what_the_folder_is(imported):
    import stragglerlab
    from stragglerlab.util.errors import InputError

    with pytest.raises(InputError, match="unannotated import"):
        stragglerlab.open(imported)


def test_an_op_table_written_before_the_async_columns_reads_as_before(imported, capsys):
    ops = pd.read_parquet(imported / "ops.parquet")
    assert {"async", "serial", "ready_s"} <= set(ops.columns)
    before = json.loads((imported / "whatif.json").read_text())["S"]
    ops.drop(columns=["async", "serial", "ready_s"]).to_parquet(imported / "ops.parquet")
    assert main(["whatif", "--run", str(imported)]) == 0
    assert json.loads((imported / "whatif.json").read_text())["S"] == pytest.approx(before)
    bad = ops.assign(ready_s=ops["start_s"] + 1.0)  # ready after it started: not the contract
    bad.to_parquet(imported / "ops.parquet")
    assert main(["whatif", "--run", str(imported)]) == 2
    assert "ready_s" in capsys.readouterr().err
