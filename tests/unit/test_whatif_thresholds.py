"""The `whatif` detector's thresholds are data its rules declare: every config field is
declared once, by one rule, with the config's default; the noise floor's statistics come
from the declarations; and docs/detectors.md's rule table is the one the code renders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stragglerlab.analysis.detectors import whatif_noise
from stragglerlab.analysis.detectors.whatif_arbitration import (
    PRECEDENCE,
    SHARED_RULE,
    declared_thresholds,
)
from stragglerlab.analysis.detectors.whatif_config import RATIOS, WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_rules import Unit
from stragglerlab.analysis.detectors.whatif_table import BEGIN, END, main, render, replace_block

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "detectors.md"


def test_every_config_field_is_declared_once_with_its_default():
    declared = declared_thresholds()
    fields = {f.name: f.default for f in dataclasses.fields(WhatIfDetectorConfig)}
    assert sorted(declared) == sorted(fields)
    for name, (rule, t) in declared.items():
        assert t.value == fields[name], f"{name}: {rule} declares {t.value}, config {fields[name]}"
        assert t.what and t.provenance.strip(), name


def test_the_ratios_held_to_one_are_the_thresholds_declared_as_ratios():
    assert sorted(RATIOS) == sorted(n for n, (_, t) in declared_thresholds().items()
                                    if t.unit is Unit.RATIO)


def test_the_noise_floor_reads_what_the_rules_declare():
    declared = declared_thresholds()
    assert set(whatif_noise.RELAXED) == {n for n, (_, t) in declared.items() if t.noise}
    assert set(whatif_noise.PER_STEP) == {n for n, (_, t) in declared.items() if t.per_step}
    for name, stat in whatif_noise.RELAXED.items():
        assert stat is declared[name][1].noise[0]
    # a statistic several rules write: every declared reading counts (the stage-shift
    # rule's rise is read for `device_compute_ratio` too)
    shift = [dict(shift_over_other_stages=1.3, shift_own=1.25)]
    f = type("F", (), {"detail": shift[0]})()
    assert whatif_noise.reading([f], "device_compute_ratio") == 1.25


def test_a_threshold_has_one_owner():
    rules = [rule for rule, _ in declared_thresholds().values()]
    assert set(rules) <= {SHARED_RULE} | {e.rule for e in PRECEDENCE}


def test_the_docs_rule_table_is_the_one_the_code_renders():
    page = DOC.read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    assert replace_block(page, render()) == page, (
        "docs/detectors.md's rule table differs from the code: run "
        "`python -m stragglerlab.analysis.detectors.whatif_table --write docs/detectors.md`")


def test_the_renderer_rewrites_only_its_block(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"before\n{BEGIN}\nstale\n{END}\nafter\n")
    assert main(["--write", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("\nafter\n") and "stale" not in text
    assert "| `device_compute_ratio` | `slow_device` | 1.1 |" in text
    (tmp_path / "bare.md").write_text("no block\n")
    assert main(["--write", str(tmp_path / "bare.md")]) == 2
    assert "no generated block" in capsys.readouterr().err


@pytest.mark.parametrize("rule", [e.rule for e in PRECEDENCE])
def test_every_rule_module_declares_its_thresholds(rule):
    module = next(e for e in PRECEDENCE if e.rule == rule).module
    assert isinstance(getattr(module, "THRESHOLDS", None), tuple), rule
