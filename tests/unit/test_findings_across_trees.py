"""benchmarks/findings_across_trees.py's comparison of two trees' findings files."""

from __future__ import annotations

import json

from tests.unit.bench_modules import load_benchmark

across = load_benchmark("findings_across_trees")


def _finding(rank: int, first: int, cause: str, conf: float) -> dict:
    return {"ranks": [{"rank": rank, "dp_rank": rank, "stage": 0}], "first_step": first,
            "last_step": 9, "root_cause": cause, "confidence": conf}


def _write(root, run: str, mode: str, findings: list[dict]) -> None:
    d = root / run / "detect"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"whatif{mode}.json").write_text(json.dumps({"findings": findings}))


def test_files_are_identical_alike_or_apart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    f = _finding(1, 3, "slow-worker", 0.9)
    _write(a, "c0/0", "", [f])
    _write(b, "c0/0", "", [f])                                  # identical
    _write(a, "c1/0", "", [f])
    _write(b, "c1/0", "", [{**f, "confidence": 0.8}])           # same finding, other number
    _write(a, "c2/0", "-online", [f])
    _write(b, "c2/0", "-online", [_finding(1, 6, "slow-worker", 0.9)])  # window moved
    _write(a, "c3/0", "", [])                                   # missing under b
    res = across.compare(a, b)
    assert (res["files"], res["identical"], res["same_findings"]) == (4, 1, 1)
    assert len(res["apart"]) == 2
    assert any("c2/0/detect/whatif-online.json" in x and "6, 9" in x for x in res["apart"])
    assert any(x.endswith("c3/0/detect/whatif.json: missing") for x in res["apart"])
