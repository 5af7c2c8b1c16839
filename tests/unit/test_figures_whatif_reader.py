"""`figures` and `report` read whatif.json through the one strict reader.

They had a loose reader of their own (a schema prefix, tables checked as mappings but
not their values): a table's number made a string was a figure's traceback (fig04,
fig05), a negative discrepancy, a zero step time, schema /99 or another job's layout
drew absurd numbers. Written by damage class over a real run folder's whatif.json, as
tests/unit/test_whatif_record_fuzz.py does for `plot`: each must be one error (exit 2)
naming the file, with no figure written.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from stragglerlab.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slow-worker"
WHATIF = Path("whatif") / "whatif.json"
STRUCTURE = ("schema", "job_meta", "compute_ideal", "steps")
SIGNED = ("comm_excess_by_worker_s",)
"""Fields a negative number is right in: an excess over the median, negative under it."""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The slow-worker example as a finished run folder (run.json) with its what-if."""
    d = tmp_path_factory.mktemp("good") / "run"
    shutil.copytree(EXAMPLE, d)
    assert main(["whatif", "--run", str(d), "--quiet"]) == 0
    steps = json.loads((d / WHATIF).read_text())["steps"]
    (d / "run.json").write_text(json.dumps({
        "schema": "stragglerlab.run/1", "outcome": "ok", "name": "slow-worker", "seed": 0,
        "scenario": {}, "trace": {"complete_steps": steps}}))
    return d


def _leaves(value, path=()):
    """(path, number) of every number in `value`, mappings and lists down."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))


def _set(doc: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


def _cases(doc: dict):
    """(name, damaged copy) by class: in every field, its first number made a string, and
    made -|x| - 1 (no time, slowdown, share or count is negative, no correlation under
    -1); then the schema; then the fuzz round's own numbers."""
    for key, value in doc.items():
        if key in STRUCTURE:
            continue
        first = next(_leaves(value, (key,)), None)
        if first is None:
            continue
        for name, bad in (("string", "x"), ("negative", -abs(first[1]) - 1.0)):
            if name == "negative" and key in SIGNED:
                continue
            damaged = copy.deepcopy(doc)
            _set(damaged, first[0], bad)
            yield f"{name}-{'.'.join(map(str, first[0]))}", damaged
    for schema in ("stragglerlab.whatif/99", "stragglerlab.whatif/1", 2, None):
        damaged = copy.deepcopy(doc)
        damaged["schema"] = schema
        yield f"schema-{schema}", damaged
    damaged = copy.deepcopy(doc)
    del damaged["schema"]  # the layout before versions has no compute_ideals
    yield "schema-missing", damaged
    # The fuzz round's own: one number edited (the block keeps its copy), a step time of 0.
    for name, path, bad in (("slowdown-tiny", ("slowdown",), 0.001),
                            ("step-time-zero", ("step_time_actual_s", str(doc["steps"][0])), 0.0),
                            ("discrepancy", ("simulation_discrepancy",), -3.0)):
        damaged = copy.deepcopy(doc)
        _set(damaged, path, bad)
        yield name, damaged


def _copy(run: Path, dest: Path, doc: dict) -> Path:
    shutil.copytree(run, dest)
    (dest / WHATIF).write_text(json.dumps(doc))
    return dest


def _figures(run: Path, out: Path) -> int:
    return main(["figures", "--runs", str(run), "--only", "fig03_waste_cdf",
                 "fig04_step_slowdown_cdf", "fig05_waste_by_optype", "sim_discrepancy_cdf",
                 "--out", str(out), "--quiet"])


def _refused(rc: int, err: str, run: Path, out: Path) -> str | None:
    """What is wrong with the answer to a damaged file, None when it is the one error."""
    lines = [x for x in err.splitlines() if x.strip()]
    if rc != 2:
        return f"exit {rc}"
    if "Traceback" in err or len(lines) != 1 or str(run / WHATIF) not in lines[0]:
        return f"not one error naming the file: {err[:300]}"
    if out.exists() and any(out.iterdir()):
        return "partial output"
    return None


def test_the_undamaged_run_draws(run, tmp_path):
    assert _figures(run, tmp_path / "out") == 0
    assert (tmp_path / "out" / "fig04_step_slowdown_cdf.png").stat().st_size > 0


def test_every_damaged_whatif_is_one_error_and_no_figure(run, tmp_path, capsys):
    doc = json.loads((run / WHATIF).read_text())
    cases = list(_cases(doc))
    assert len(cases) > 40
    wrong = {}
    for i, (name, damaged) in enumerate(cases):
        bad_run, out = _copy(run, tmp_path / f"run-{i}", damaged), tmp_path / f"out-{i}"
        capsys.readouterr()
        problem = _refused(_figures(bad_run, out), capsys.readouterr().err, bad_run, out)
        if problem:
            wrong[name] = problem
    assert not wrong, wrong


@pytest.mark.parametrize("table,field", [("step_slowdown", "step_slowdown.0"),
                                         ("slowdown_by_optype",
                                          "slowdown_by_optype.forward-compute")])
def test_a_string_in_a_drawn_table_names_the_field(run, tmp_path, capsys, table, field):
    # The fuzz round's tracebacks (fig04, fig05): the copy and its block edited alike.
    doc = json.loads((run / WHATIF).read_text())
    key = field.split(".", 1)[1]
    for d in (doc, doc["compute_ideals"][doc["compute_ideal"]]):
        d[table] = {**d[table], key: "x"}
    bad_run = _copy(run, tmp_path / "run", doc)
    capsys.readouterr()
    assert _figures(bad_run, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"{bad_run / WHATIF}: {field}: expected a number" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_result_of_another_job_is_named_so(run, tmp_path, capsys):
    doc = json.loads((run / WHATIF).read_text())
    doc["job_meta"].update(dp_size=4, world_size=16)
    bad_run = _copy(run, tmp_path / "run", doc)
    capsys.readouterr()
    assert _figures(bad_run, tmp_path / "out") == 2
    assert "job_meta.dp_size: is 4, the run folder's meta.yaml says 2" in capsys.readouterr().err


def test_report_reads_the_runs_the_same_way(run, tmp_path, capsys):
    figs = tmp_path / "figs"
    assert _figures(run, figs) == 0
    doc = json.loads((run / WHATIF).read_text())
    doc["schema"] = "stragglerlab.whatif/99"
    bad_run = _copy(run, tmp_path / "run", doc)
    capsys.readouterr()
    assert main(["report", "--figures", str(figs), "--runs", str(bad_run), "--out",
                 str(tmp_path / "rep"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{bad_run / WHATIF}: schema: is 'stragglerlab.whatif/99'" in err
    assert not (tmp_path / "rep").exists()
