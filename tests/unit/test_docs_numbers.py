"""Every number in the measured docs names a command a reader can run from the repository.

Three checks over the pages whose numbers are measurements (`AUDITED`):

* every command a page cites exists: a repository path (`benchmarks/bench_whatif.py`,
  `config/test.yaml`, `docs/detectors/test-seed20-scores.json`, a glob such as
  `docs/detectors/heldback-*-scores.json` matching at least one file), a bare script or
  module file name (`bench_residual.py`, `whatif_ring.py`) somewhere in the repository,
  a score file named bare (`test-seed20-scores.json`) in docs/detectors/, a
  `stragglerlab VERB` (with its first positional where that is a closed set, as in
  `stragglerlab list scenarios`) in the CLI's parser, a `python -m MODULE` that imports;
* in the pages held to it (`SECTIONED`), every section with a table of numbers names a
  command, in itself or in the section above it;
* no audited page, nor any page of docs/, names an absolute path on some machine
  (`/tmp/...`, `/work/...`, a home): a command a reader runs writes under the checkout.

A page that cites a removed script, a renamed verb or a config file that is gone fails here.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

AUDITED = [
    "docs/detectors.md",
    "docs/detectors/README.md",
    "benchmarks/README.md",
    "docs/monitor.md",
    "docs/unannotated.md",
    "docs/torch-workloads.md",
    "docs/faults.md",
    "examples/README.md",
]
SECTIONED = ["docs/detectors.md", "benchmarks/README.md"]
# An absolute path on some machine (a scratch folder, a home, the build machine's tree): a
# reader's machine has none of them, so a page names a repository path, `results/...` or a
# placeholder instead. URL paths (`/metrics`), system tools (`/usr/bin/time`) and `/proc`
# are not such paths.
OUTSIDE = re.compile(r"(?<![\w.~:/-])/(?:tmp|home|root|work|mnt|scratch|data|srv)/")
# Files of other tools a page describes (not commands of this repository), with the tool.
OTHER_TOOLS = {
    "compute_mw.py": "the paper's artifact (ByteDance-Seed/StragglerAnalysis)",
    "compute_ms.py": "the paper's artifact",
    "timers.py": "the paper's artifact",
    "wia.py": "the paper's artifact",
}

# A repository path: a top-level folder of the repository, then a file name with an
# extension (globs allowed); not preceded by a path character (so `../shared/x` and
# `/usr/bin/x` are not read as repository paths).
_TOP = "|".join(("benchmarks", "config", "tests", "docs", "examples", "analysis", "figures",
                 "workloads", "injectors", "stragglerlab", "rules"))
_PATH = re.compile(rf"(?<![\w./*<>-])((?:{_TOP})/[\w./*-]*\.(?:py|sh|yaml|yml|json|md|smk|toml))"
                   r"(?![\w*<>-])")
# A bare file name of a script or module, as benchmarks/README.md names its scripts.
_BARE = re.compile(r"(?<![\w./*<>{-])([a-z_][a-z0-9_]*\.(?:py|sh))(?![\w./-])")
# A score file named bare, as docs/detectors.md's status table names them.
_SCORES = re.compile(r"(?<![\w./*<>-])([\w-]+-scores\.json)\b")
# In code: the CLI with its verb, and `python -m MODULE`.
_VERB = re.compile(r"(?:^|[\s;(&|`$])(?:-m\s+)?stragglerlab\s+([a-z][\w-]*)(?:\s+([a-z][\w-]*))?")
_MODULE = re.compile(r"-m\s+(stragglerlab(?:\.[a-z_][\w]*)+)")
# What counts as naming a command in a section: the CLI, the workflow, a module run with
# -m, the test runner, asv, or a script of benchmarks/ or tests/ (by path or bare name).
_COMMAND = re.compile(r"\bstragglerlab\s+[a-z][\w-]*|\bsnakemake\b|\bpython\s+-m\s+[\w.]+"
                      r"|\bpytest\b|\basv\s+run|(?:benchmarks|tests/[\w/]+)/[\w.-]+\.(?:py|sh)")
_SCRIPT = re.compile(r"(?<![\w/.-])([\w-]+\.(?:py|sh))\b")

def _code(text: str) -> list[str]:
    """The page's code: fenced blocks and inline spans."""
    out, fence = [], None
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence is None and stripped[:3] in ("```", "~~~"):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            else:
                out.append(line)
            continue
        out += re.findall(r"`([^`]+)`", line)
    return out


@cache
def _files() -> tuple[set[str], set[str]]:
    """Every file of the repository, as relative paths and as bare names."""
    rels, names = set(), set()
    for p in ROOT.rglob("*"):
        parts = p.relative_to(ROOT).parts
        if any(part.startswith(".") or part in ("__pycache__", "results", "site")
               for part in parts) or not p.is_file():
            continue
        rels.add(p.relative_to(ROOT).as_posix())
        names.add(p.name)
    return rels, names


@cache
def _parser() -> argparse.ArgumentParser:
    from stragglerlab.cli import build_parser

    return build_parser()


def _verb_problem(verb: str, arg: str | None) -> str | None:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    if verb not in sub.choices:
        return f"`stragglerlab {verb}`: no such verb (verbs: {', '.join(sorted(sub.choices))})"
    positional = [a for a in sub.choices[verb]._actions if not a.option_strings]
    if arg and positional and positional[0].choices and arg not in positional[0].choices:
        return (f"`stragglerlab {verb} {arg}`: {verb} takes one of "
                f"{', '.join(map(str, positional[0].choices))}")
    return None


def _path_exists(rel: str, page: Path) -> bool:
    rels, _ = _files()
    for base in (ROOT, page.parent):
        cand = (base / rel).resolve()
        if not cand.is_relative_to(ROOT):
            continue
        key = cand.relative_to(ROOT).as_posix()
        if "*" in rel:
            if any(Path(f).match(key) and f.count("/") == key.count("/") for f in rels):
                return True
        elif key in rels or cand.exists():
            return True
    return False


def cited_problems(page: Path, text: str) -> list[str]:
    """What the page cites that the repository does not have."""
    problems = []
    _, names = _files()
    for rel in sorted(set(_PATH.findall(text))):
        if not _path_exists(rel, page):
            problems.append(f"{rel}: no such file in the repository")
    for name in sorted(set(_BARE.findall(text))):
        if name not in names and name not in OTHER_TOOLS:
            problems.append(f"{name}: no file of that name in the repository")
    for name in sorted(set(_SCORES.findall(text))):
        if not (ROOT / "docs" / "detectors" / name).is_file():
            problems.append(f"{name}: no such score file in docs/detectors/")
    for code in _code(text):
        for verb, arg in _VERB.findall(code):
            problem = _verb_problem(verb, arg or None)
            if problem:
                problems.append(problem)
        for module in _MODULE.findall(code):
            if importlib.util.find_spec(module) is None:
                problems.append(f"`python -m {module}`: no such module")
    return problems


def sections_without_command(text: str) -> list[str]:
    """Headings of the sections that hold a table of numbers but name no command, in
    themselves or in the section they sit in."""
    sections: list[tuple[int, str, str]] = []  # (level, heading, body)
    level, heading, body = 0, "(top)", []
    for line in text.splitlines():
        m = re.match(r"^(#{1,6})\s+(.*)", line)
        if m:
            sections.append((level, heading, "\n".join(body)))
            level, heading, body = len(m.group(1)), m.group(2), []
        else:
            body.append(line)
    sections.append((level, heading, "\n".join(body)))
    missing = []
    for i, (lvl, head, body) in enumerate(sections):
        rows = [r for r in body.splitlines() if r.lstrip().startswith("|")
                and not re.fullmatch(r"[\s|:-]+", r)]
        if not any(re.search(r"\d", "|".join(r.split("|")[2:])) for r in rows[1:]):
            continue
        scope = [body, head]
        for plvl, phead, pbody in reversed(sections[:i]):
            if plvl < lvl:
                scope += [pbody, phead]
                lvl = plvl
        joined = "\n".join(scope)
        if not (_COMMAND.search(joined)
                or any((ROOT / "benchmarks" / n).is_file() for n in _SCRIPT.findall(joined))):
            missing.append(head)
    return missing


@pytest.mark.parametrize("rel", AUDITED)
def test_every_cited_command_exists(rel: str) -> None:
    page = ROOT / rel
    problems = cited_problems(page, page.read_text(encoding="utf-8"))
    assert not problems, f"{rel} cites what the repository does not have:\n" + "\n".join(problems)


def _pages() -> list[Path]:
    """The audited pages and every Markdown page of docs/."""
    return sorted({ROOT / rel for rel in AUDITED} | set((ROOT / "docs").rglob("*.md")))


def test_no_page_names_a_path_outside_the_repository() -> None:
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
             for page in _pages()
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert not found, ("paths outside the repository (name results/... or a placeholder):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("rel", SECTIONED)
def test_every_table_of_numbers_names_its_command(rel: str) -> None:
    missing = sections_without_command((ROOT / rel).read_text(encoding="utf-8"))
    assert not missing, (f"{rel}: these sections show numbers but name no command that "
                         "produces them:\n" + "\n".join(missing))


def test_the_checks_catch_what_they_name() -> None:
    page = ROOT / "docs" / "detectors.md"
    good = ("Run `benchmarks/bench_residual.py` and `stragglerlab list scenarios`; "
            "`python -m stragglerlab.workflow.split_coverage`; config/test.yaml, "
            "docs/detectors/test-seed20-scores.json, ../shared/x/y.py, bench_ring.py")
    assert cited_problems(page, good) == []
    bad = ("`benchmarks/bench_gone.py`; `stragglerlab whatiff --run R`; "
           "`stragglerlab list sceanrios`; `python -m stragglerlab.nowhere`; "
           "config/gone.yaml; docs/detectors/gone-*-scores.json; gone_script.sh; "
           "`test-seed99-scores.json`")
    problems = cited_problems(page, bad)
    for needle in ("benchmarks/bench_gone.py", "whatiff", "sceanrios", "stragglerlab.nowhere",
                   "config/gone.yaml", "gone-*-scores.json", "gone_script.sh",
                   "test-seed99-scores.json"):
        assert any(needle in p for p in problems), (needle, problems)
    for text in ("--out /tmp/x", "see /work/runs/s52", "`/home/me/traces`"):
        assert OUTSIDE.search(text), text
    for text in ("GET /metrics", "/usr/bin/time", "results/tmp/x", "http://h/data/x",
                 "../shared/x", "tests/data/differential"):
        assert not OUTSIDE.search(text), text
    table = ("## A\n\n| n | s |\n|---|---|\n| 8 | 0.25 |\n\n"
             "## B\n\n`benchmarks/bench_ring.py`\n\n| n |\n|---|\n| 4 |\n")
    assert sections_without_command(table) == ["A"]
    nested = ("## A\n\n`stragglerlab detect --run R`\n\n"
              "### A1\n\n| n | s |\n|---|---|\n| 8 | 0.25 |\n")
    assert sections_without_command(nested) == []
