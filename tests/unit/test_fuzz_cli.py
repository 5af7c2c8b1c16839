"""Fuzz corpus: every bad input to every verb exits 2 with one line, no traceback, no output.

The cases (tests/unit/fuzz_corpus.py, fuzz_corpus_runs.py, fuzz_corpus_types.py) cover
whatif, detect, score, figures, report, train and import. Each runs in-process through
`stragglerlab.cli.main` and must:

* return 2 (train: before Ray is imported or the launcher is called),
* print exactly one stderr line, `stragglerlab VERB: error: ...`, naming the
  bad file (or flag) and no traceback,
* leave the --out folder absent or unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stragglerlab.cli import main
from tests.unit.fuzz_corpus import Case, make_base, whatif_cases
from tests.unit.fuzz_corpus_runs import run_cases
from tests.unit.fuzz_corpus_types import type_cases

CASES: list[Case] = whatif_cases() + run_cases() + type_cases()


def test_corpus_is_large_and_distinct():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 150
    verbs = {c.verb for c in CASES}
    assert verbs >= {"whatif", "detect", "score", "figures", "report", "train"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_base(tmp_path_factory.mktemp("fuzz-base"))


def _snapshot(out: Path):
    if out.is_file():
        return ("file", out.read_bytes())
    if out.is_dir():
        return ("dir", sorted((str(p.relative_to(out)), p.stat().st_size)
                              for p in out.rglob("*")))
    return None


@pytest.fixture
def no_launch(monkeypatch):
    """train must fail in validation: the launcher is never reached."""
    import stragglerlab.workloads.launcher as launcher

    def launch(*_a, **_k):
        raise AssertionError("train reached the launcher with a bad config")

    monkeypatch.setattr(launcher, "launch", launch)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, base, tmp_path, capsys, no_launch):
    argv, named, out = case.build(tmp_path / "case", base)
    before = _snapshot(out)
    ray_before = "ray" in sys.modules
    rc = main([*argv, "--quiet"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, f"exit {rc}: {err}"
    assert len(lines) == 1, err
    assert lines[0].startswith(f"stragglerlab {case.verb}: error: "), lines[0]
    assert named in lines[0], lines[0]
    assert "Traceback" not in err
    assert len(lines[0]) < 2000, "echoed input must be truncated"
    assert _snapshot(out) == before, "partial output left behind"
    if case.verb == "train" and not ray_before:
        assert "ray" not in sys.modules, "train imported Ray before refusing the config"
