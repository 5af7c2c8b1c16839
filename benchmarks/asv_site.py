"""mkdocs hook: the asv suite's history published beside the docs site.

The per-commit results live in the repository (`benchmarks/asv-results/`, written by
`asv run`, see benchmarks/README.md "asv suite"); after the site is built, `asv publish`
renders their history into `site/benchmarks-history/` (asv's own static pages: each
benchmark's value over the commits, per machine). Where asv or the git history it
orders commits by is missing, a one-page note says so instead, so the site still builds.
"""

from __future__ import annotations

import html
import logging
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.asv_site")
BENCHMARKS = Path(__file__).resolve().parent
OUT = "benchmarks-history"
"""The folder under the site that holds the published history."""


def _asv() -> str | None:
    beside = Path(sys.executable).with_name("asv")
    return str(beside) if beside.exists() else shutil.which("asv")


def publish(site_dir: Path) -> str | None:
    """Publish into site_dir/benchmarks-history; None on success, else why not."""
    out = Path(site_dir) / OUT
    results = BENCHMARKS / "asv-results"
    if not any(results.glob("*/*.json")):
        return "no asv results in benchmarks/asv-results (run the suite: benchmarks/README.md)"
    asv = _asv()
    if asv is None:
        return "asv is not installed (pip install asv; the dev extra has it)"
    try:
        done = subprocess.run([asv, "publish", "--no-pull", "--html-dir", str(out)],
                              cwd=BENCHMARKS, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"asv publish did not run: {e}"
    if done.returncode != 0:
        return f"asv publish failed: {(done.stderr or done.stdout).strip()[-500:]}"
    return None


def on_post_build(config, **kwargs) -> None:
    """mkdocs: after the build, publish the history (or say why it is not there)."""
    site = Path(config["site_dir"])
    why = publish(site)
    if why is None:
        log.info("asv history published in %s", site / OUT)
        return
    log.info("asv history not published: %s", why)
    (site / OUT).mkdir(parents=True, exist_ok=True)
    (site / OUT / "index.html").write_text(
        "<!doctype html><title>Benchmark history</title><p>The benchmark history was not "
        f"published with this build: {html.escape(why)}.</p>\n")
