"""The torch-wrapper workload examples (examples/torch-*): real Kineto traces of DDP, FSDP
and pipelining runs with a slow worker, imported unannotated as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stragglerlab.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _import(name: str, tmp_path: Path) -> tuple[dict, dict, int]:
    folder = EXAMPLES / f"torch-{name}"
    assert main(["import", "kineto", "--traces", str(folder / "kineto"), "--out",
                 str(tmp_path), "--quiet"]) == 0
    (fault,) = json.loads((folder / "faults.json").read_text())
    return (json.loads((tmp_path / "import.json").read_text()),
            json.loads((tmp_path / "whatif.json").read_text()), fault["targets"][0]["rank"])


@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_data_parallel_examples_name_the_slow_worker(tmp_path, name):
    report, whatif, victim = _import(name, tmp_path)
    assert report["model"] == "general" and report["local_ops"] == 0
    scores = whatif["worker_score"]
    assert int(max(scores, key=scores.get)) == victim
    assert whatif["S"] > 1.1


def test_pipelining_example_pairs_no_p2p_op(tmp_path):
    """torch 2.13's gloo writes no peer for a send or recv: none can be paired."""
    import pandas as pd

    report, _whatif, _victim = _import("pipelining", tmp_path)
    assert report["model"] == "general"
    ops = pd.read_parquet(tmp_path / "ops.parquet")
    p2p = ops[ops["kind"].isin(["send", "recv"])]
    assert len(p2p) > 0 and (p2p["peer"] == -1).all() and (p2p["group"] == -1).all()
