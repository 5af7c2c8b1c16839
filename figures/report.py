"""The paper-vs-testbed report: every figure beside the paper's number, the detector
leaderboard (figures/report_leaderboard.py: ranked by F1, intervals, confusion matrices,
kind x layout family), the mitigation gains and §6 table, and where the testbed agrees
with the paper and why not.

Inputs: a figures folder written by `stragglerlab figures` (`<NAME>.png` and
`<NAME>.json` per figure), optionally the scores JSON of `stragglerlab score`
and the run folders (for provenance: runs, seeds, versions). Outputs
`report.md` (GitHub markdown, images by relative link) and `report.html`
(self-contained: PNGs embedded as base64 data URIs, inline CSS). Both are
rendered from one list of blocks, so they always say the same.

    stragglerlab report --figures results/figures --scores results/scores.json \\
        --runs results/*/* --out results/report
    from stragglerlab.figures.report import write_report
"""

from __future__ import annotations

import base64
import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.figures.registry import FIGURE_SCHEMA
from stragglerlab.figures.report_blocks import Block, render_html, render_markdown
from stragglerlab.figures.report_leaderboard import SCORE_FIGURES, BoardFigure, score_blocks
from stragglerlab.figures.scores import ScoreFile, read_scores
from stragglerlab.util.atomic import atomic_write_text
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import Checker, distinct_runs, echo, load_json

TABLE_FIGURES = ("table_s6", "table_mitigation")
"""Figure outputs shown in the 'mitigation gains and §6 table' section, not as figures."""
MAX_LIST_ITEMS = 8
"""Longer lists in `ours` (e.g. heatmap cells) are summarized, not printed."""


@dataclass
class FigureEntry:
    """One `<NAME>.json` of the figures folder."""

    name: str
    """Output basename (the module's NAME)."""
    title: str
    """One-line title."""
    images: list[str]
    """PNG files, relative to the figures folder; the first is the figure itself."""
    source: str
    """Where the data came from."""
    paper: str
    """The paper's number(s)."""
    ours: dict
    """Our numbers ({} when the figure had no data)."""
    note: str
    """Agreement / disagreement with the paper, or why there is no data."""

    @property
    def has_data(self) -> bool:
        """The figure was drawn from data (not the 'no data' placeholder)."""
        return bool(self.ours)


@dataclass
class Provenance:
    """How the report's inputs were produced."""

    generated_utc: str
    """When the report was written (UTC, ISO 8601)."""
    n_runs: int = 0
    """Run folders given."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Run count per outcome (ok / failed)."""
    scenarios: dict[str, list[int]] = field(default_factory=dict)
    """Seeds per scenario."""
    versions: dict[str, list[str]] = field(default_factory=dict)
    """Distinct versions per component (python, torch, ray, stragglerlab) over the runs."""
    backends: list[str] = field(default_factory=list)
    """torch.distributed backends used."""


def _figure_order() -> list[str]:
    try:
        from stragglerlab.figures.registry import figure_names

        return figure_names()
    except Exception:  # the report must still render if a figure module is broken
        return []


FIGURE_FIX = "rebuild it with `stragglerlab figures --out DIR`"
MAX_FIGURE_JSON = 4 * 1024 * 1024
"""Largest figure result JSON read (scores: figures/scores.py MAX_SCORES_BYTES)."""
MAX_EMBED_BYTES = 32 * 1024 * 1024
"""Largest PNG embedded in report.html."""


def _figure_entry(path: Path, raw: object) -> FigureEntry:
    """A validated figure result; every image a PNG inside the figures folder."""
    chk = Checker(path, FIGURE_FIX)
    raw = chk.mapping(raw, path.name)
    if "schema" in raw:  # older figure results have none
        chk.schema(raw["schema"], FIGURE_SCHEMA, "figure result")
    name = chk.string(raw.get("name"), "name")
    if name != path.stem:  # `figures` writes <name>.json: another name is another figure's
        chk.fail("name", f"{echo(name)}, but the file is {path.name}: a figure result is "
                         "named after its file")
    texts = {k: raw.get(k) for k in ("title", "source", "note")}
    for k, v in texts.items():
        chk.string(v, k, optional=True)
    paper = raw.get("paper", "")
    if not isinstance(paper, (str, dict, list, int, float)) or isinstance(paper, bool):
        chk.fail("paper", f"expected text or numbers, got {echo(paper)}")
    ours = chk.mapping(raw.get("ours") or {}, "ours")
    chk.finite_tree(ours, "ours")
    images = []
    for i, p in enumerate(chk.listing(raw.get("paths") or [], "paths")):
        p = chk.string(p, f"paths[{i}]")
        if not p.lower().endswith(".png"):
            continue  # the PDF beside it
        rel = Path(p)
        inside = (path.parent / rel).resolve().is_relative_to(path.parent.resolve())
        if rel.is_absolute() or ".." in rel.parts or not inside:
            chk.fail(f"paths[{i}]", f"{echo(p)} is outside the figures folder; a figure's "
                                    "images are file names inside it")
        images.append(rel.as_posix())
    return FigureEntry(name=name, title=texts["title"] or name, images=images,
                       source=texts["source"] or "", paper=str(paper), ours=ours,
                       note=texts["note"] or "")


def load_figure_entries(fig_dir: Path) -> list[FigureEntry]:
    """Every figure result in fig_dir, in the registry's figure order, unknown ones last.

    `<NAME>.json` of a registered figure must be a valid figure result (else one
    InputError naming it); other JSON files count only when they look like one.
    """
    if not fig_dir.is_dir():
        raise InputError("figures folder not found (run `stragglerlab figures --out DIR` "
                         "first)", str(fig_dir))
    known = set(_figure_order())
    entries = {}
    for path in sorted(fig_dir.glob("*.json")):
        if path.stem in known:
            raw = load_json(path, "figure result", FIGURE_FIX, max_bytes=MAX_FIGURE_JSON)
        else:
            try:
                raw = load_json(path, "figure result", FIGURE_FIX, max_bytes=MAX_FIGURE_JSON)
            except InputError:
                continue  # not a figure result; the report lists what it can read
            if not isinstance(raw, dict) or "paper" not in raw or "name" not in raw:
                continue
        entry = _figure_entry(path, raw)
        entries[entry.name] = entry
    order = {n: i for i, n in enumerate(_figure_order())}
    return sorted(entries.values(), key=lambda e: (order.get(e.name, len(order)), e.name))


def load_scores(path: Path | None) -> tuple[ScoreFile | None, str]:
    """(scores, '') or (None, why not scored) when no scores file exists.

    A scores file that exists but is not what `stragglerlab score` writes (not
    UTF-8, not JSON, not {detector: {metric: number, ci, confusion, ...}}) is one
    InputError (figures/scores.py checks it).
    """
    if path is None:
        return None, "not scored: no --scores file given (run `stragglerlab score`)"
    if not path.exists():
        return None, f"not scored: {path} does not exist (run `stragglerlab score`)"
    scores = read_scores(path)
    if not scores.detectors:
        return None, f"not scored: {path} holds no detector scores"
    return scores, ""


def _now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def provenance(run_dirs: list[Path]) -> Provenance:
    """Runs, seeds, outcomes and versions from the run folders' run.json (a folder listed
    twice is an InputError: it would count twice)."""
    from stragglerlab.figures.data import load_run

    distinct_runs(run_dirs, "run_dirs")
    prov = Provenance(generated_utc=_now_utc(), n_runs=len(run_dirs))
    versions: dict[str, set[str]] = {}
    for d in run_dirs:
        run = load_run(d)
        prov.outcomes[run.outcome] = prov.outcomes.get(run.outcome, 0) + 1
        prov.scenarios.setdefault(run.scenario, []).append(run.seed)
        recorded = run.record.get("versions")
        for k, v in (recorded if isinstance(recorded, dict) else {}).items():
            versions.setdefault(str(k), set()).add(str(v))
        backend = run.record.get("backend")
        if backend and str(backend) not in prov.backends:
            prov.backends.append(str(backend))
    prov.versions = {k: sorted(v) for k, v in sorted(versions.items())}
    prov.scenarios = {k: sorted(v) for k, v in sorted(prov.scenarios.items())}
    return prov


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def flatten_ours(ours: dict, prefix: str = "", where: str = "the figure's JSON"
                 ) -> list[tuple[str, str]]:
    """(dotted key, printable value) rows of a nested `ours`; big lists summarized
    (pointing to `where` for the values)."""
    rows: list[tuple[str, str]] = []
    for k, v in ours.items():
        key = f"{prefix}{k}"
        if k == "markdown":
            continue  # tables are shown as tables
        if isinstance(v, dict):
            rows += flatten_ours(v, f"{key}.", where)
        elif isinstance(v, list):
            flat = _flat_list(v)
            if len(flat) <= MAX_LIST_ITEMS and all(not isinstance(x, list) for x in v):
                rows.append((key, ", ".join(_fmt(x) for x in flat)))
            else:
                shape = f"{len(v)}x{len(v[0])}" if v and isinstance(v[0], list) else str(len(v))
                rows.append((key, f"[{shape} values in {where}]"))
        else:
            rows.append((key, _fmt(v)))
    return rows


def first_sentence(text: str, limit: int = 200) -> str:
    """The text up to its first '. ' (the whole text if none), cut at `limit` characters."""
    head = text.split(". ", 1)[0].rstrip(".")
    return head if len(head) <= limit else head[:limit - 3].rstrip() + "..."


def _flat_list(v: list) -> list:
    return [y for x in v for y in (x if isinstance(x, list) else [x])]


def parse_markdown_table(md: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a simple pipe table, as the table figures write in ours['markdown']."""
    lines = [ln.strip() for ln in md.strip().splitlines() if ln.strip().startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    body = [r for r in cells[1:] if not all(set(c) <= set("-: ") for c in r)]
    return (cells[0] if cells else []), body


def _figure_blocks(e: FigureEntry, fig_dir: Path, level: str = "h3") -> list[Block]:
    blocks = [Block(level, e.title)]
    if e.images:
        blocks.append(Block("img", e.title, image=fig_dir / e.images[0]))
    if e.ours.get("markdown"):
        header, rows = parse_markdown_table(str(e.ours["markdown"]))
        blocks.append(Block("table", header=header, rows=rows))
    ours = flatten_ours(e.ours, where=f"{e.name}.json")
    rows = [["paper", e.paper]]
    rows += [[f"ours: {k}", v] for k, v in ours] if ours else [["ours", "no data"]]
    rows.append(["data", e.source])
    blocks.append(Block("table", header=["", ""], rows=rows))
    if e.note:
        blocks.append(Block("p", e.note))
    return blocks


def build_blocks(entries: list[FigureEntry], fig_dir: Path, scores: ScoreFile | None,
                 scores_why: str, prov: Provenance | None) -> list[Block]:
    """The whole report as blocks (rendered to markdown and HTML)."""
    blocks = [Block("h1", "stragglerlab: the OSDI'25 straggler paper vs the testbed"),
              Block("h2", "How this report was produced")]
    when = prov.generated_utc if prov else _now_utc()
    facts = [f"generated {when} (UTC) by `stragglerlab report`",
             f"figures from `{fig_dir}` ({len(entries)} figure results, "
             f"{sum(e.has_data for e in entries)} with data)"]
    if prov is not None and prov.n_runs:
        outcome = ", ".join(f"{n} {k}" for k, n in sorted(prov.outcomes.items()))
        facts.append(f"{prov.n_runs} run folders ({outcome}), {len(prov.scenarios)} scenarios: "
                     + ", ".join(f"{s} (seeds {', '.join(map(str, seeds))})"
                                 for s, seeds in prov.scenarios.items()))
        if prov.versions:
            facts.append("versions: " + ", ".join(f"{k} {'/'.join(v)}"
                                                  for k, v in prov.versions.items()))
        if prov.backends:
            facts.append("torch.distributed backend: " + ", ".join(prov.backends))
    else:
        facts.append("run folders: not given (--runs), so versions are not listed")
    blocks.append(Block("ul", items=facts))

    board = [e for e in entries if e.name in SCORE_FIGURES]
    entries = [e for e in entries if e.name not in SCORE_FIGURES]  # no paper counterpart
    figures = [e for e in entries if e.name not in TABLE_FIGURES]
    tables = [e for e in entries if e.name in TABLE_FIGURES]
    blocks.append(Block("h2", "At a glance"))
    blocks.append(Block("table", header=["figure", "paper", "testbed (from the note)"], rows=[
        [e.title, e.paper, first_sentence(e.note) if e.has_data else "no data"]
        for e in entries]))
    blocks.append(Block("h2", "Figures"))
    if not figures:
        blocks.append(Block("p", "No figure results found in the figures folder."))
    for e in figures:
        blocks += _figure_blocks(e, fig_dir)
    blocks += score_blocks(scores, scores_why, [
        BoardFigure(e.title, fig_dir / e.images[0] if e.images else None, e.note)
        for e in board])
    blocks.append(Block("h2", "Mitigation gains and the §6 table"))
    if not tables:
        blocks.append(Block("p", "No table_s6.json / table_mitigation.json in the figures "
                                 "folder."))
    for e in tables:
        blocks += _figure_blocks(e, fig_dir)
    blocks.append(Block("h2", "Where the testbed agrees with the paper and where it does not, "
                              "and why"))
    with_data = [f"**{e.title}**: {e.note}" for e in entries if e.has_data and e.note]
    blocks.append(Block("ul", items=with_data or ["No figure had data."]))
    missing = [f"**{e.title}**: {e.note or 'no data'}" for e in entries if not e.has_data]
    if missing:
        blocks += [Block("p", "Not reproduced in this report (inputs missing):"),
                   Block("ul", items=missing)]
    return blocks


def write_report(fig_dir: str | Path, scores_path: str | Path | None,
                 run_dirs: list[str | Path], out_dir: str | Path) -> tuple[Path, Path]:
    """Write out_dir/report.md and out_dir/report.html; returns their paths."""
    fig_dir, out = Path(fig_dir), Path(out_dir)
    entries = load_figure_entries(fig_dir)
    scores, why = load_scores(Path(scores_path) if scores_path else None)
    if not entries and scores is None:  # a report of nothing: the wrong folder?
        raise InputError("no figure results here (the <figure>.json files `stragglerlab "
                         "figures` writes beside its images) and no scores to report; pass "
                         "the folder of `stragglerlab figures --out DIR` (or run that first), "
                         "or --scores", str(fig_dir))
    prov = provenance([Path(d) for d in run_dirs]) if run_dirs else None
    blocks = build_blocks(entries, fig_dir, scores, why, prov)
    md_path, html_path = out / "report.md", out / "report.html"
    atomic_write_text(md_path, render_markdown(
        blocks, lambda p: Path(os.path.relpath(p.resolve(), out.resolve())).as_posix()))
    atomic_write_text(html_path, render_html(blocks, _data_uri,
                                             title="stragglerlab: paper vs testbed"))
    return md_path, html_path


def _data_uri(path: Path) -> str | None:
    """base64 data URI of a PNG, None when it cannot be read."""
    try:
        if path.stat().st_size > MAX_EMBED_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")

