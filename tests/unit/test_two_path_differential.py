"""benchmarks/two_path_differential.py on the committed examples/kineto-dp2-pp2 traces
(slow tier: two imports and a what-if, ~20 s on 2 cores).

The example was trimmed to its user_annotation ranges, so its 96 P2P ops name no peer on
the general path and stay local: the two paths read the same gate outcome and verdict
(not straggling) but S 1.059 (vocabulary) vs 1.015 (general), and the general path's top
worker is rank 0 where the vocabulary one is (DP 1, PP 1), i.e. rank 3.

    .venv/bin/python -m pytest -m slow tests/unit/test_two_path_differential.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.bench_modules import load_benchmark

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kineto-dp2-pp2"


def test_example_differential_as_measured(tmp_path):
    bench = load_benchmark("two_path_differential")
    row = bench.compare(EXAMPLE, tmp_path)
    voc, gen = row["vocabulary"], row["general"]
    assert voc["S"] == pytest.approx(1.059, abs=0.002)
    assert gen["S"] == pytest.approx(1.015, abs=0.002)
    assert row["S_rel_diff"] == pytest.approx(-0.0415, abs=0.002)
    assert voc["top_workers"] == [3] and voc["top_workers_coords"] == [[1, 1]]
    assert gen["top_workers"] == [0]
    assert row["same_gate"] and voc["verdict"] == gen["verdict"] == "not straggling"
    assert (gen["matched_ops"], gen["local_ops"]) == (48, 96)
    notes = json.loads((tmp_path / "general" / "import.json").read_text())["notes"]
    assert any(n.startswith("96 send/recv op(s) name no peer") for n in notes)
    summ = bench.summary([row])
    assert (summ["within_2pct"], summ["same_top_worker"], summ["same_gate"]) == (0, 0, 1)
    # neither path calls the job straggling: both name nobody, whatever their top worker
    assert row["same_named_workers"] and summ["same_named_workers"] == 1
    assert summ["all_three"] == summ["all_three_named"] == 0
