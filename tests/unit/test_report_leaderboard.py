"""The report's leaderboard and the confusion-matrix figure, from a hand-built scores file.

tests/data/scores_small.json has three detectors in file order nvrx, whatif,
op-minmax (F1 0.444, 0.947, 0.686), intervals, confusion matrices and, for two
of them, a fault kind x layout family breakdown; the leaderboard must rank
them whatif, op-minmax, nvrx with every value and interval as written.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from stragglerlab.cli import main  # noqa: E402
from stragglerlab.figures.data import FigureData, load_figure_data  # noqa: E402
from stragglerlab.figures.registry import build_figure, figure_inputs, figure_names  # noqa: E402
from stragglerlab.figures.report import load_scores, write_report  # noqa: E402
from stragglerlab.figures.scores import read_scores  # noqa: E402
from stragglerlab.util.errors import InputError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "scores_small.json"
LABELS = ["slow-worker", "net-throttle", "net-delay", "gc-pauses", "none"]

ROWS = [
    "| 1 | `whatif` | 0.947 [0.857, 1] | 0.833 [0.5, 1] | 1 [1, 1] | 0.9 [0.75, 1] "
    "| 2 [1, 3] | 0.12 [0.05, 0.2] | 6 |",
    "| 2 | `op-minmax` | 0.686 [0.4, 0.9] | 0.667 [0.33, 1] | 0.8 [0.5, 1] | 0.6 [0.3, 0.85] "
    "| 9 [5, 12] | 0.11 [0.02, 0.3] | 6 |",
    "| 3 | `nvrx` | 0.444 [0.2, 0.7] | 0.5 [0.17, 0.83] | 0.5 [0.25, 0.8] | 0.4 [0.2, 0.6] "
    "| 4 [2, 6] | 0.3 [0.1, 0.5] | 6 |",
]


def test_scores_parse_and_rank():
    board = read_scores(SMALL)
    assert [d.name for d in board.detectors] == ["nvrx", "whatif", "op-minmax"]
    assert [d.name for d in board.ranked()] == ["whatif", "op-minmax", "nvrx"]
    whatif = board.ranked()[0]
    assert whatif.overall.get("f1").cell() == "0.947 [0.857, 1]"
    assert whatif.by_kind_family[("gc-pauses", "dp+pp")].get("f1").value == 0.857
    assert board.families() == ["pure-dp", "pure-pp", "dp+pp"]


@pytest.fixture
def figures(tmp_path) -> Path:
    out = tmp_path / "figs"
    assert main(["figures", "--quiet", "--scores", str(SMALL), "--only", "fig_confusion",
                 "--out", str(out)]) == 0
    return out


def test_confusion_figure_holds_the_matrices(figures):
    doc = json.loads((figures / "fig_confusion.json").read_text())
    ours = doc["ours"]
    assert ours["labels"] == LABELS
    assert ours["detectors"] == ["whatif", "op-minmax", "nvrx"] and ours["headline"] == "whatif"
    # Rows: true cause; columns: predicted (net-throttle taken for net-delay by whatif).
    assert ours["matrices"]["whatif"] == [[2, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0],
                                          [0, 0, 0, 1, 0], [0, 0, 0, 0, 2]]
    assert ours["matrices"]["nvrx"] == [[1, 0, 0, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0],
                                        [1, 0, 0, 0, 0], [0, 0, 0, 0, 2]]
    # net-throttle ~ net-delay counts as right; net-throttle -> slow-worker does not.
    assert ours["cause_right"] == {"whatif": 6, "op-minmax": 5, "nvrx": 3}
    assert ours["runs"] == {"whatif": 6, "op-minmax": 6, "nvrx": 6}
    assert doc["paths"] == ["fig_confusion.png", "fig_confusion.pdf"]
    assert imread(figures / "fig_confusion.png").shape[1] > 600
    assert (figures / "fig_confusion.pdf").stat().st_size > 1000
    assert "`whatif` (best F1) names the right cause in 6 of 6 runs." in doc["note"]


def test_confusion_figure_without_scores_is_no_data(tmp_path):
    result = build_figure("fig_confusion", load_figure_data([]), tmp_path)
    assert result.ours == {} and result.note.startswith("no data: needs detector scores")
    assert (tmp_path / "fig_confusion.png").is_file()
    assert json.loads((tmp_path / "fig_confusion.json").read_text())["ours"] == {}
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps({"whatif": {"f1": 1.0}}))  # no confusion matrix
    result = build_figure("fig_confusion", FigureData(runs=[], scores=read_scores(legacy)),
                          tmp_path / "l")
    assert result.ours == {} and "confusion matrix" in result.note


def test_leaderboard_in_markdown_and_html(figures, tmp_path):
    md_path, html_path = write_report(figures, SMALL, [], tmp_path / "rep")
    md, page = md_path.read_text(), html_path.read_text()
    board = md.split("## Detector leaderboard")[1].split("\n## ")[0]
    header = ("| # | detector | F1 | cause accuracy | precision | recall | latency (steps) "
              "| slowdown error | runs |")
    assert header in board
    at = [board.index(row) for row in ROWS]
    assert at == sorted(at)
    # The headline's confusion matrix as a table, then the figure.
    assert "headline detector `whatif` (runs; 6 of 6 with the right cause)" in board
    assert ("| | → slow-worker | → net-throttle | → net-delay | → gc-pauses | → none |"
            in board.replace("|  |", "| |"))
    assert "| true net-throttle | · | · | 1 | · | · |" in board
    assert "![Detector confusion matrices" in board and "fig_confusion.png)" in board
    # Kind x layout family, per detector, in leaderboard order; op-minmax has none.
    assert board.index("**`whatif`**") < board.index("**`nvrx`**")
    assert "**`op-minmax`**" not in board
    whatif = board.split("**`whatif`**")[1].split("**`nvrx`**")[0]
    assert "| fault kind | pure-dp | pure-pp | dp+pp |" in whatif
    assert "| slow-worker | - | 1 [1, 1] / 1 (2) | - |" in whatif
    assert "| gc-pauses | - | - | 0.86 [0.86, 0.86] / 1 (1) |" in whatif
    assert "| net-throttle | 1 [1, 1] / 0 (1) | - | - |" in whatif
    assert whatif.index("| net-throttle") < whatif.index("| clean |")  # clean last
    nvrx = board.split("**`nvrx`**")[1]
    assert "| slow-worker | - | 0.5 [0, 1] / 0.5 (2) | - |" in nvrx
    # Not a paper figure: not in the figures section nor in the paper comparison.
    assert "fig_confusion" not in md.split("## Detector leaderboard")[0]
    assert "confusion" not in md.split("## Where the testbed agrees")[1]
    # HTML says the same, the figure embedded.
    assert ("<tr><td>1</td><td><code>whatif</code></td><td>0.947 [0.857, 1]</td>"
            "<td>0.833 [0.5, 1]</td>") in page
    assert "<td>2</td><td><code>op-minmax</code></td><td>0.686 [0.4, 0.9]</td>" in page
    assert "<td>slow-worker</td><td>-</td><td>1 [1, 1] / 1 (2)</td>" in page
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', page)) == 1


BAD = {
    "ci-reversed": {"whatif": {"f1": 0.5, "ci": {"f1": [0.9, 0.1]}}},
    "ci-string": {"whatif": {"ci": {"recall": "wide"}}},
    "confusion-negative": {"whatif": {"confusion": {"none": {"none": -1}}}},
    "kind-family-key": {"whatif": {"by_kind_family": {"slow-worker": {"f1": 1.0}}}},
    "f1-above-1": {"whatif": {"f1": 1.5}},
    "detector-list": {"whatif": [1]},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scores_are_one_input_error(case, tmp_path, capsys):
    bad = tmp_path / "scores.json"
    bad.write_text(json.dumps(BAD[case]))
    with pytest.raises(InputError, match=re.escape(str(bad))):
        read_scores(bad)
    with pytest.raises(InputError, match=re.escape(str(bad))):
        load_scores(bad)
    out = tmp_path / "out"
    assert main(["figures", "--quiet", "--scores", str(bad), "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(bad) in err[0] and not out.exists()


def test_registered_and_wired_to_scores():
    assert "fig_confusion" in figure_names()
    assert figure_inputs("fig_confusion") == ("scores",)


def test_real_score_file_renders(tmp_path):
    """What `stragglerlab score` writes (detected_online is text) loads, ranks and draws."""
    from tests.unit.fuzz_corpus import make_base

    base = make_base(tmp_path / "base")
    res = tmp_path / "res"
    assert main(["score", "--quiet", "--runs", str(base.run), "--detector", "whatif",
                 "--offline-only", "--out", str(res)]) == 0
    scores = res / "scores.json"
    assert isinstance(json.loads(scores.read_text())["whatif"]["detected_online"], str)
    figs = tmp_path / "figs"
    assert main(["figures", "--quiet", "--runs", str(base.run), "--scores", str(scores),
                 "--only", "fig_confusion", "--out", str(figs)]) == 0
    doc = json.loads((figs / "fig_confusion.json").read_text())
    assert doc["ours"]["matrices"]["whatif"] == [[1]]  # one slow-worker run, named
    shutil.copy(base.figures / "fig03_waste_cdf.json", figs)
    md_path, _ = write_report(figs, scores, [], tmp_path / "rep")
    md = md_path.read_text()
    assert re.search(r"\| 1 \| `whatif` \| 1 \[1, 1\] \| 1 \[1, 1\] \|", md)
    assert "| fault kind | dp+pp |\n|---|---|\n| slow-worker | 1 [1, 1] / 1 (1) |" in md


def test_workflow_builds_the_confusion_figure_after_score(tmp_path):
    """The figure's rule reads results/scores.json, so `score` runs before it."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "results/figures/fig_confusion.json", "-n", "-p",
         "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(ROOT / "config" / "smoke.yaml")],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert out.index("rule score:") < out.index("rule figure_fig_confusion:")
    job = out.split("rule figure_fig_confusion:")[1]
    assert "results/scores.json" in job.split("output:")[0].split("input:")[1]
    assert re.search(r"figures --only fig_confusion .*--scores results/scores\.json", job)
    assert not (tmp_path / "results").exists()
