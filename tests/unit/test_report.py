"""The paper-vs-testbed report (`figures/report.py`, `stragglerlab report`).

A figures folder, a scores file and run folders are hand-made in tmp_path.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import yaml  # noqa: E402

from stragglerlab.cli import main  # noqa: E402
from stragglerlab.figures.report import (  # noqa: E402
    flatten_ours,
    load_figure_entries,
    load_scores,
    parse_markdown_table,
    write_report,
)
from stragglerlab.figures.report_blocks import Block, render_html, render_markdown  # noqa: E402
from stragglerlab.figures.style import figure_style, new_figure, save_figure  # noqa: E402
from stragglerlab.util.errors import InputError  # noqa: E402

MITIGATION_MD = ("| mitigation | gain (ours) | gain (paper) |\n|---|---|---|\n"
                 "| planned GC | +17.7% | +12.6% |")


def _png(base: Path) -> None:
    with figure_style():
        fig = new_figure(2, 1.5)
        fig.add_subplot().plot([0, 1], [1, 0])
        save_figure(fig, base, pdf=True)


def _figure(fig_dir: Path, name: str, title: str, ours: dict, note: str,
            paper: str = "paper number", image: bool = True) -> None:
    if image:
        _png(fig_dir / name)
    doc = {"name": name, "title": title, "paths": [f"{name}.png", f"{name}.pdf"],
           "source": "testbed runs (2 jobs)", "paper": paper, "ours": ours, "note": note}
    (fig_dir / f"{name}.json").write_text(json.dumps(doc))


@pytest.fixture
def inputs(tmp_path):
    figs = tmp_path / "figs"
    figs.mkdir()
    _figure(figs, "fig09_mb_time_vs_seqsq", "Fig. 9: time vs sum(s^2)",
            {"seq-imbalance/0": {"r2": 0.93, "slope_ms_per_mtok2": 210.5}},
            "R^2 0.93: linear as in the paper. Noise is CPU timing.", paper="linear")
    _figure(figs, "fig14_heatmaps", "Fig. 14: heatmaps",
            {"reference": {"AR": {"cells": [[1.97, 1.01], [1.0, 1.0]],
                                  "matches_artifact": True}}},
            "trace-AR: our cells equal the artifact's (max |diff| 7e-08).")
    _figure(figs, "fig12_long_context", "Fig. 12: long context", {},
            "no data: needs ok runs with whatif/whatif.json")
    _figure(figs, "table_mitigation", "Mitigation gains",
            {"gc_gain_pct": 17.7, "markdown": MITIGATION_MD},
            "planned GC +17.7% (paper +12.6%).")
    (figs / "broken.json").write_text("{not json")
    scores = tmp_path / "scores.json"
    metrics = {"precision": 0.9, "recall": 0.75, "f1": 0.818, "root_cause_accuracy": 0.8,
               "median_latency_steps": 2.0, "slowdown_error": 0.05, "n_runs": 12}
    scores.write_text(json.dumps({
        "whatif-worker": {**metrics, "by_kind": {"slow-worker": {**metrics, "f1": 1.0},
                                                 "gc-pauses": {**metrics, "f1": 0.25}}},
        "zscore": {**metrics, "precision": 0.5, "median_latency_steps": None, "by_kind": {}},
    }))
    run = tmp_path / "runs" / "gc-pauses" / "0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({
        "name": "gc-pauses", "seed": 0, "outcome": "ok", "backend": "gloo",
        "scenario": {"name": "gc-pauses"},
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "stragglerlab": "0.1.0"}}))
    (run / "meta.yaml").write_text(yaml.safe_dump({"dp_size": 2, "pp_size": 2}))
    (run / "faults.json").write_text("[]")
    return figs, scores, run


def test_report_markdown_and_html(inputs, tmp_path):
    figs, scores, run = inputs
    out = tmp_path / "report"
    md_path, html_path = write_report(figs, scores, [run], out)
    md, page = md_path.read_text(), html_path.read_text()

    # Provenance from run.json.
    assert "1 run folders (1 ok)" in md and "torch 2.13.0+cpu" in md and "gc-pauses (seeds 0)" in md
    # Figures in registry order, each with its image linked relative to the report.
    assert md.index("Fig. 9") < md.index("Fig. 12") < md.index("Fig. 14")
    assert "![Fig. 9: time vs sum(s^2)](../figs/fig09_mb_time_vs_seqsq.png)" in md
    assert "| paper | linear |" in md
    assert "| ours: seq-imbalance/0.r2 | 0.93 |" in md
    assert "[2x2 values in fig14_heatmaps.json]" in md
    assert "max \\|diff\\|" in md  # pipes in cells escaped for GitHub tables
    # Leaderboard (a legacy score file: no intervals, run-level latency), then per kind.
    assert ("| # | detector | F1 | cause accuracy | precision | recall | latency (steps) "
            "| slowdown error | runs |") in md
    assert "| 1 | `whatif-worker` | 0.818 | 0.8 | 0.9 | 0.75 | 2 | 0.05 | 12 |" in md
    assert "| 2 | `zscore` | 0.818 | 0.8 | 0.5 | 0.75 | - | 0.05 | 12 |" in md
    assert "| whatif-worker | gc-pauses | 0.9 | 0.75 | 0.25 |" in md
    # Mitigation table rendered from the figure's markdown, in its own section.
    section = md.split("## Mitigation gains and the §6 table")[1]
    assert "| planned GC | +17.7% | +12.6% |" in section
    # Agreement section from the notes; no-data figures listed apart.
    why = md.split("## Where the testbed agrees with the paper")[1]
    assert "**Fig. 9: time vs sum(s^2)**: R^2 0.93" in why
    assert "Not reproduced" in why and "**Fig. 12: long context**: no data" in why

    # HTML: self-contained, every image embedded, same content.
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//|file:)", page)
    assert "<link" not in page and "<script" not in page and "<style>" in page
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(srcs) == 4 and all(s.startswith("data:image/png;base64,") for s in srcs)
    embedded = base64.b64decode(srcs[0].split(",", 1)[1])
    assert embedded == (figs / "fig09_mb_time_vs_seqsq.png").read_bytes()
    assert "<td>1</td><td><code>whatif-worker</code></td><td>0.818</td>" in page
    assert "<strong>Fig. 9: time vs sum(s^2)</strong>" in page
    assert "max |diff|" in page
    assert not list(out.glob(".*.tmp"))  # atomic writes leave nothing behind


def test_missing_scores_and_runs(inputs, tmp_path):
    figs, _, _ = inputs
    md_path, html_path = write_report(figs, tmp_path / "nope.json", [], tmp_path / "r")
    md = md_path.read_text()
    assert "not scored: " in md and "does not exist" in md
    assert "not scored: " in html_path.read_text()
    assert "run folders: not given" in md
    md2, _ = write_report(figs, None, [], tmp_path / "r2")
    assert "not scored: no --scores file given" in md2.read_text()


def test_missing_image_and_empty_folder(inputs, tmp_path):
    figs, scores, _ = inputs
    (figs / "fig09_mb_time_vs_seqsq.png").unlink()
    md_path, html_path = write_report(figs, scores, [], tmp_path / "r")
    assert "*(image missing:" in md_path.read_text()
    assert 'class="missing"' in html_path.read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    md_path, _ = write_report(empty, scores, [], tmp_path / "r3")  # scores only: a report
    assert "No figure results found" in md_path.read_text()
    with pytest.raises(InputError, match="no figure results here"):  # nothing at all
        write_report(empty, None, [], tmp_path / "r4")


def test_load_scores_refuses_bad_files(tmp_path):
    """A missing scores file is 'not scored'; a present but bad one is an InputError."""
    assert load_scores(tmp_path / "missing.json")[0] is None
    bad = tmp_path / "bad.json"
    for text in ("[1, 2", "[]", '{"whatif": "good"}', '{"whatif": {"f1": "high"}}'):
        bad.write_text(text)
        with pytest.raises(InputError, match=str(bad)):
            load_scores(bad)
    bad.write_text("{}")
    assert load_scores(bad)[0] is None


def test_entries_skip_non_figure_json(inputs):
    figs, _, _ = inputs
    (figs / "other.json").write_text(json.dumps({"hello": 1}))
    names = [e.name for e in load_figure_entries(figs)]
    assert names == ["fig09_mb_time_vs_seqsq", "fig12_long_context", "fig14_heatmaps",
                     "table_mitigation"]
    with pytest.raises(InputError, match="figures folder not found"):
        load_figure_entries(figs / "missing")


def test_helpers():
    rows = dict(flatten_ours({"a": 1.23456, "b": {"c": [1, 2]}, "d": list(range(20)),
                              "markdown": "x", "ok": True, "none": None}, where="f.json"))
    assert rows == {"a": "1.235", "b.c": "1, 2", "d": "[20 values in f.json]", "ok": "yes",
                    "none": "-"}
    header, body = parse_markdown_table(MITIGATION_MD)
    assert header == ["mitigation", "gain (ours)", "gain (paper)"]
    assert body == [["planned GC", "+17.7%", "+12.6%"]]
    blocks = [Block("h2", "T <x>"), Block("p", "a `b` **c**"), Block("ul", items=["i"])]
    page = render_html(blocks, lambda p: None, title="t")
    assert "<h2>T &lt;x&gt;</h2>" in page and "<code>b</code>" in page
    assert render_markdown(blocks, str) == "## T <x>\n\na `b` **c**\n\n- i\n"


def test_cli_report(inputs, tmp_path, capsys):
    figs, scores, run = inputs
    out = tmp_path / "cli"
    assert main(["report", "--figures", str(figs), "--scores", str(scores), "--runs", str(run),
                 "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert main(["report", "--figures", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "figures folder not found" in capsys.readouterr().err
    assert main(["report", "--figures", str(figs), "--runs", str(tmp_path / "no-run"),
                 "--out", str(out)]) == 2
