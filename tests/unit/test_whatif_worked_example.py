"""docs/layout.md's worked example builds: the rule module from its first code block,
written into a package of its own, and the registry line from its second, added to the
precedence table, give a rule with a new threshold that is a setting, a noise-floor
statistic and a row of the rule table, and whose finding the detector reports."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from stragglerlab.analysis.detectors import get_detector, load_run, whatif_arbitration
from stragglerlab.analysis.detectors.whatif_arbitration import PRECEDENCE, Entry, Settle
from stragglerlab.analysis.detectors.whatif_noise import RELAXED, relaxed_thresholds
from stragglerlab.analysis.detectors.whatif_table import render
from stragglerlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Adding a rule to the `whatif` detector"


def _example() -> tuple[str, str]:
    """(the rule module, the registry line) from docs/layout.md."""
    page = (ROOT / "docs" / "layout.md").read_text()
    section = page.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the worked example is one module and one line"
    module, line = blocks
    assert len(line.strip().splitlines()) == 1
    return module, line.strip()


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """The example rule in a package of its own, its line added to the table."""
    module, line = _example()
    name = re.search(r'rule="(\w+)"', line).group(1)
    package = tmp_path / "example_rules"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / f"{name}.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = eval(line.rstrip(","), {"Entry": Entry, "Settle": Settle})  # the doc's one line
    entry = dataclasses.replace(entry, package="example_rules")
    monkeypatch.setattr(whatif_arbitration, "PRECEDENCE", (*PRECEDENCE, entry))
    return name


def test_the_worked_example_adds_a_rule_with_its_threshold(registered, tmp_path):
    assert "spike_ratio" not in RELAXED  # the shipped rules do not have it
    assert "spike_ratio" in relaxed_thresholds()  # the noise floor reads it once added
    assert "| `spike_ratio` | `spike` | 1.25 |" in render(whatif_arbitration.PRECEDENCE)
    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "slow-worker", run)
    assert main(["whatif", "--trace", str(run / "trace.parquet"), "--meta",
                 str(run / "meta.yaml"), "--out", str(run / "whatif"), "--quiet"]) == 0

    detector = get_detector("whatif")
    assert detector.config.spike_ratio == 1.25
    spikes = [f for f in detector.detect(load_run(str(run))) if f.detail.get("test") == "spike"]
    assert len(spikes) == 1 and spikes[0].detail["spike_ratio"] >= 1.25

    # a setting like any other: so strict that the rule names nothing
    strict = get_detector("whatif", {"spike_ratio": "1000"})
    assert strict.config.spike_ratio == 1000.0
    assert not [f for f in strict.detect(load_run(str(run))) if f.detail.get("test") == "spike"]
