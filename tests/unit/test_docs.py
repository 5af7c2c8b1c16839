"""The documentation: the mkdocs site builds with --strict, and README.md stays a short,
well-linked front page (every relative link resolves to something in the repository)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 250

# Inline links and images: [text](target) / ![alt](target); the text may span lines.
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
# Reference definitions: [id]: target
_REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _without_code(text: str) -> str:
    """The Markdown with fenced code blocks, indented code and inline code blanked out."""
    out, fence = [], None
    for line in text.splitlines():
        stripped = line.lstrip()
        marker = stripped[:3]
        if fence is None and marker in ("```", "~~~"):
            fence = marker
            out.append("")
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            out.append("")
            continue
        out.append(re.sub(r"`+[^`]*`+", "``", line))
    return "\n".join(out)


def relative_links(text: str) -> list[str]:
    """Every link target in the Markdown that points into the repository (no URL scheme,
    not a bare #anchor), anchors and queries stripped."""
    body = _without_code(text)
    targets = [m.group(1) for m in _INLINE.finditer(body)]
    targets += [m.group(1) for m in _REFDEF.finditer(body)]
    out = []
    for t in targets:
        t = t.strip("<>")
        if not t or t.startswith("#") or _SCHEME.match(t) or t.startswith("//"):
            continue
        t = unquote(t.split("#", 1)[0].split("?", 1)[0])
        if t:
            out.append(t)
    return out


def test_link_parser_finds_links_outside_code() -> None:
    text = ("see [a](docs/a.md#x) and ![img\nalt](figs/b.png \"title\") and [c](https://x.org)\n"
            "`[d](not/a/link.md)`\n```\n[e](in/fence.md)\n```\n[f]: docs/ref.md\n[g](#local)\n")
    assert relative_links(text) == ["docs/a.md", "figs/b.png", "docs/ref.md"]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()
    # The asv history beside the site (benchmarks/asv_site.py): asv's pages where the
    # results' commits are in this clone's history, else a page that says why not.
    history = tmp_path / "site" / "benchmarks-history"
    assert (history / "index.html").is_file()
    commits = [json.loads(p.read_text())["commit_hash"]
               for p in (ROOT / "benchmarks" / "asv-results").glob("*/*.json")
               if p.name != "machine.json"]
    known = commits and all(subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"],
                                           cwd=ROOT, capture_output=True).returncode == 0
                            for c in commits)
    if known and pytest.importorskip("asv"):
        assert (history / "index.json").is_file(), (history / "index.html").read_text()


def test_readme_relative_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    broken = []
    for target in relative_links(text):
        path = (README.parent / target).resolve()
        inside = path == ROOT or ROOT in path.parents
        if not inside or not path.exists():
            broken.append(target)
    assert not broken, f"README.md links to paths not in the repository: {broken}"


def test_readme_is_short() -> None:
    """README.md is the front page; reference material belongs in docs/ (the mkdocs site)."""
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md has {n} lines, over {README_MAX_LINES}: move reference material into docs/")
