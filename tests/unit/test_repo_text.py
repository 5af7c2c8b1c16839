"""The repository's text says the design, not how it came to be, and cites nothing outside it.

The rule, over the library code (`stragglerlab/` and the top-level packages it links:
`analysis/`, `workloads/`, `injectors/`, `figures/`), the config YAML (`config/`), the
workflow (`Snakefile`, `rules/`), the benchmarks' scripts and README, the docs (`docs/`)
and `README.md` / `examples/README.md`:

* no "stop <number>" (nor "stops 55-56", "stop-49"): the numbered work sessions the
  project was built in are history, which belongs in commit messages and `CHANGELOG.md`;
* no absolute path under `/work/`: the machine the project was built on is not the
  reader's. An input that lives beside a checkout is named relative to the repository
  (`../shared/...`), and only where a command needs it.

Not scanned: the tests (they may read inputs where the machine keeps them), the score
files in `docs/detectors/*.json` (recorded `stragglerlab score` outputs, whose run paths
are data) and `CHANGELOG.md` (history is its subject). `ALLOWED` lists the lines that must
keep such text, each with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCANNED = (
    [ROOT / "README.md", ROOT / "Snakefile", ROOT / "examples" / "README.md",
     ROOT / "benchmarks" / "README.md"]
    + [p for d in ("stragglerlab", "analysis", "workloads", "injectors", "figures")
       for p in (ROOT / d).rglob("*.py")]
    + sorted((ROOT / "config").glob("*.yaml"))
    + sorted((ROOT / "rules").glob("*.smk"))
    + sorted((ROOT / "docs").rglob("*.md"))
    + [p for ext in ("*.py", "*.sh", "*.yaml") for p in (ROOT / "benchmarks").glob(ext)]
)

HISTORY = re.compile(r"(?<![\w-])stops?[ -]?\d+", re.IGNORECASE)
OUTSIDE = re.compile(r"(?<![\w.])/work/")

ALLOWED = {
    # The HTA interpreter's default where the benchmark was built; --hta-python or
    # STRAGGLERLAB_HTA_PYTHON set it elsewhere (a default is behaviour, not a citation).
    ("benchmarks/hta_load_side_by_side.py", '"/work/hta-venv/bin/python"'),
}


def _offences() -> list[str]:
    found = []
    for path in SCANNED:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not (HISTORY.search(line) or OUTSIDE.search(line)):
                continue
            if any(rel == f and s in line for f, s in ALLOWED):
                continue
            found.append(f"{rel}:{n}: {line.strip()[:120]}")
    return found


def test_no_stop_numbers_or_paths_outside_the_repository():
    offences = _offences()
    assert not offences, ("history or paths outside the repository in its text "
                          "(say the design; history goes to git and CHANGELOG.md):\n"
                          + "\n".join(offences))


def test_the_rule_catches_what_it_names():
    for text in ("until stop 44 it was", "(stops 55-56)", "the stop-49 fuzz round",
                 "Stop 58 compared"):
        assert HISTORY.search(text), text
    assert OUTSIDE.search("see /work/runs/s42")
    for text in ("a window that stops", "../shared/differential", "a 3-step stop",
                 "non-stop 4x"):
        assert not (HISTORY.search(text) or OUTSIDE.search(text)), text


def test_every_scanned_kind_is_there():
    # A moved folder must not empty the scan silently.
    rels = {p.relative_to(ROOT).parts[0] for p in SCANNED if p.is_file()}
    assert {"stragglerlab", "analysis", "config", "docs", "benchmarks", "README.md"} <= rels
