"""One file name, two records; outputs among inputs.

whatif.json is both the what-if's result and the whatif detector's findings; a wrong
--out replaced one with the other. An import's outputs written among its rank traces were
read as rank traces by the next import. A plot of one job was drawn into another run's
folder. Each is now one clear error, and nothing on disk changes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from stragglerlab.cli import main
from tests.unit.cli_errors import one_error
from tests.unit.monitor_helpers import synth

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto" / "dp2-pp2"


def _analysed(path: Path, *flags: str) -> Path:
    folder = synth(path, "--steps", "4", *flags)
    assert main(["whatif", "--run", str(folder), "--quiet"]) == 0
    assert main(["detect", "--run", str(folder), "--quiet"]) == 0
    return folder


def test_whatif_does_not_replace_findings_named_whatif_json(tmp_path, capsys):
    run = _analysed(tmp_path / "r")
    findings = (run / "detect" / "whatif.json").read_bytes()
    capsys.readouterr()
    assert main(["whatif", "--run", str(run), "--out", str(run / "detect"), "--quiet"]) == 2
    assert "holds a stragglerlab.findings/1 record, not a what-if result" in one_error(
        capsys, "whatif")
    assert (run / "detect" / "whatif.json").read_bytes() == findings
    # Its own what-if is replaced as before.
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0


def test_detect_does_not_replace_another_runs_what_if(tmp_path, capsys):
    a, b = _analysed(tmp_path / "a"), _analysed(tmp_path / "b", "--seed", "3")
    result = (b / "whatif" / "whatif.json").read_bytes()
    capsys.readouterr()
    assert main(["detect", "--run", str(a), "--out", str(b / "whatif"), "--quiet"]) == 2
    assert "holds a stragglerlab.whatif/2 record, not a detector's findings" in one_error(
        capsys, "detect")
    assert (b / "whatif" / "whatif.json").read_bytes() == result


def test_import_refuses_to_write_among_its_rank_traces(tmp_path, capsys):
    traces = tmp_path / "k"
    shutil.copytree(KINETO, traces)
    before = sorted(p.name for p in traces.iterdir())
    assert main(["import", "kineto", "--traces", str(traces), "--out", str(traces),
                 "--quiet"]) == 2
    assert "is the folder of the rank traces" in one_error(capsys, "import")
    assert sorted(p.name for p in traces.iterdir()) == before


def test_plot_of_another_jobs_what_if_needs_its_own_out(tmp_path, capsys):
    a, b = _analysed(tmp_path / "a"), _analysed(tmp_path / "b", "--seed", "3")
    capsys.readouterr()
    assert main(["plot", "--run", str(b), "--whatif", str(a / "whatif" / "whatif.json"),
                 "--quiet"]) == 2
    assert f"is not of --run {b}" in one_error(capsys, "plot")
    assert not (b / "plot").exists()
    assert main(["plot", "--run", str(b), "--whatif", str(b / "whatif" / "whatif.json"),
                 "--quiet"]) == 0  # its own: drawn into RUN/plot
    assert main(["plot", "--run", str(b), "--whatif", str(a / "whatif" / "whatif.json"),
                 "--out", str(tmp_path / "pa"), "--quiet"]) == 0
