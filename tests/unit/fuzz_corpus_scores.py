"""Bad scores files for `report --scores` and `figures --scores` (the leaderboard's input).

The companion of tests/unit/fuzz_corpus_runs.py (same `Case`, same `Base`):
scores files that `stragglerlab score` never writes (a share above 1, an
interval that is not [lo, hi], a negative confusion count, a kind x family key
without its family, ...), each of which must be one error naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.fuzz_corpus import Base, Case
from tests.unit.fuzz_corpus_runs import DEEP, NOT_UTF8, _report_scores

SCORES_BAD = {
    "f1-above-1": {"whatif": {"f1": 1.5}},
    "ci-string": {"whatif": {"f1": 0.5, "ci": {"f1": "wide"}}},
    "ci-three": {"whatif": {"f1": 0.5, "ci": {"f1": [0.1, 0.2, 0.3]}}},
    "ci-reversed": {"whatif": {"f1": 0.5, "ci": {"f1": [0.9, 0.1]}}},
    "ci-nan": {"whatif": {"f1": 0.5, "ci": {"f1": [float("nan"), 1.0]}}},
    "confusion-negative": {"whatif": {"f1": 0.5, "confusion": {"none": {"none": -1}}}},
    "confusion-float": {"whatif": {"f1": 0.5, "confusion": {"none": {"none": 1.5}}}},
    "confusion-row-list": {"whatif": {"f1": 0.5, "confusion": {"none": [1]}}},
    "kind-family-no-bar": {"whatif": {"f1": 0.5, "by_kind_family": {"slow-worker": {}}}},
    "kind-family-f1-text": {"whatif": {"by_kind_family": {"gc-pauses|dp+pp": {"f1": "x"}}}},
    "by-kind-list": {"whatif": {"by_kind": [1]}},
    "n-runs-negative": {"whatif": {"n_runs": -2}},
    "schema-other": {"schema": "other/9", "whatif": {"f1": 0.5}},
    "schema-number": {"schema": 1, "whatif": {"f1": 0.5}},
}
"""Scores files `stragglerlab score` never writes."""


def _figures_scores(content: object):
    """figures --scores with a bad (or, for None, a missing) scores file."""
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        path = d / "scores.json"
        if content is not None:
            path.write_bytes(content if isinstance(content, bytes)
                             else json.dumps(content).encode())
        return (["figures", "--runs", str(base.run), "--scores", str(path), "--only",
                 "fig_confusion", "--out", str(d / "out")], str(path), d / "out")
    return build


def scores_cases() -> list[Case]:
    """Bad scores files for `report` and for `figures --scores`."""
    cases = [Case(f"report-scores-{k}", "report", _report_scores(v))
             for k, v in SCORES_BAD.items()]
    figures = {**SCORES_BAD, "list": [1], "not-utf8": NOT_UTF8, "deep": DEEP.encode(),
               "missing": None}
    return cases + [Case(f"figures-scores-{k}", "figures", _figures_scores(v))
                    for k, v in figures.items()]
