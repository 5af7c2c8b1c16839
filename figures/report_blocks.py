"""Report building blocks and their two renderings: GitHub markdown and self-contained HTML.

A report is a list of `Block`s (headings, paragraphs, bullet lists, tables,
images). `render_markdown` links images by a relative path; `render_html`
embeds them (the caller's `embed(path)` returns a data URI) and inlines its
CSS, so the HTML file needs nothing beside it. Inline markup in text is the
small markdown subset both understand: `code` and **bold**.

    from stragglerlab.figures.report_blocks import Block, render_markdown, render_html
    md = render_markdown([Block("h1", "Title"), Block("p", "text")], relpath)

This module is a library; it has nothing to run on its own.
"""

from __future__ import annotations

import enum
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class BlockKind(str, enum.Enum):
    """What a block is."""

    H1 = "h1"
    H2 = "h2"
    H3 = "h3"
    P = "p"
    UL = "ul"
    TABLE = "table"
    IMG = "img"


@dataclass
class Block:
    """One piece of the report."""

    kind: BlockKind | str
    """Heading level, paragraph, bullet list, table or image."""
    text: str = ""
    """Heading / paragraph text, or an image's alt text."""
    header: list[str] = field(default_factory=list)
    """Table column titles (all empty: a table without a visible header in HTML)."""
    rows: list[list[str]] = field(default_factory=list)
    """Table cells, row by row."""
    items: list[str] = field(default_factory=list)
    """Bullet list entries."""
    image: Path | None = None
    """Image file (a PNG) of an image block."""

    def __post_init__(self) -> None:
        self.kind = BlockKind(self.kind)


CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 60rem;
       margin: 2rem auto; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3rem; }
h2 { border-bottom: 1px solid #eee; padding-bottom: .2rem; margin-top: 2.2rem; }
h3 { margin-top: 1.8rem; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .9rem; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; vertical-align: top; text-align: left; }
th { background: #f4f4f4; }
td:first-child { font-weight: 600; white-space: nowrap; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
code { background: #f4f4f4; padding: 0 .2rem; border-radius: 3px; }
.missing { color: #a00; font-style: italic; }
"""

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def inline_html(text: str) -> str:
    """Escape text for HTML, then turn `code` and **bold** into tags."""
    out = html.escape(str(text))
    out = _CODE.sub(r"<code>\1</code>", out)
    return _BOLD.sub(r"<strong>\1</strong>", out)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block], link: Callable[[Path], str]) -> str:
    """GitHub markdown; `link(path)` gives an image's relative link."""
    out: list[str] = []
    for b in blocks:
        if b.kind in (BlockKind.H1, BlockKind.H2, BlockKind.H3):
            out += ["#" * int(b.kind.value[1]) + " " + b.text, ""]
        elif b.kind is BlockKind.P:
            out += [b.text, ""]
        elif b.kind is BlockKind.UL:
            out += [f"- {item}" for item in b.items] + [""]
        elif b.kind is BlockKind.TABLE:
            n = max([len(b.header)] + [len(r) for r in b.rows]) if (b.header or b.rows) else 0
            header = list(b.header) + [""] * (n - len(b.header))
            out.append("| " + " | ".join(_md_cell(c) for c in header) + " |")
            out.append("|" + "---|" * n)
            for row in b.rows:
                row = list(row) + [""] * (n - len(row))
                out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
            out.append("")
        elif b.kind is BlockKind.IMG:
            if b.image is not None and b.image.is_file():
                out += [f"![{b.text}]({link(b.image)})", ""]
            else:
                out += [f"*(image missing: {b.image})*", ""]
    return "\n".join(out).rstrip() + "\n"


def render_html(blocks: list[Block], embed: Callable[[Path], str | None], title: str) -> str:
    """One self-contained HTML page; `embed(path)` gives an image's data URI (None: missing)."""
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>"]
    for b in blocks:
        if b.kind in (BlockKind.H1, BlockKind.H2, BlockKind.H3):
            out.append(f"<{b.kind.value}>{inline_html(b.text)}</{b.kind.value}>")
        elif b.kind is BlockKind.P:
            out.append(f"<p>{inline_html(b.text)}</p>")
        elif b.kind is BlockKind.UL:
            out.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in b.items)
                       + "</ul>")
        elif b.kind is BlockKind.TABLE:
            out.append("<table>")
            if any(str(c) for c in b.header):
                out.append("<tr>" + "".join(f"<th>{inline_html(c)}</th>" for c in b.header)
                           + "</tr>")
            out += ["<tr>" + "".join(f"<td>{inline_html(c)}</td>" for c in row) + "</tr>"
                    for row in b.rows]
            out.append("</table>")
        elif b.kind is BlockKind.IMG:
            uri = embed(b.image) if b.image is not None else None
            if uri is None:
                out.append(f'<p class="missing">image missing: {html.escape(str(b.image))}</p>')
            else:
                out.append(f'<p><img alt="{html.escape(b.text, quote=True)}" src="{uri}"></p>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
