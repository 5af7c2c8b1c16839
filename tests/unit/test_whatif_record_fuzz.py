"""whatif.json damaged field by field: every reader refuses it as bad input (exit 2, one
message, nothing written), never a picture drawn from numbers that disagree with the file.

Written from classes of damage, not from cases: each top-level field of a real
whatif.json replaced by a string, a non-finite number or a nested list, a table's
number (one or two mappings down) made negative, or the copy of the chosen ideal's
metrics edited away from its block.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from stragglerlab.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slow-worker"
STRUCTURE = ("schema", "job_meta", "compute_ideals", "compute_ideal", "steps")
DAMAGE = {"string": lambda v: "abc", "nan": lambda v: math.nan,
          "nested-list": lambda v: [[1e308] * 3]}


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    """A real whatif.json, as `stragglerlab whatif` writes it."""
    out = tmp_path_factory.mktemp("whatif")
    assert main(["whatif", "--trace", str(EXAMPLE / "trace.parquet"), "--meta",
                 str(EXAMPLE / "meta.yaml"), "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "whatif.json").read_text())


def _first_number_leaf(value):
    """A function giving (container, key) of the first number one or two mappings down in
    a copy of `value`, None when `value` is not a mapping holding one."""
    if not isinstance(value, dict):
        return None
    for k, v in value.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return lambda copy_, k=k: (copy_, k)
        if isinstance(v, dict):
            for k2, x in v.items():
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    return lambda copy_, k=k, k2=k2: (copy_[k], k2)
    return None


def _cases(doc: dict):
    for key in doc:
        if key in STRUCTURE:
            continue
        for name, damage in DAMAGE.items():
            bad = copy.deepcopy(doc)
            bad[key] = damage(bad[key])
            yield f"{name}-{key}", bad
        leaf = _first_number_leaf(doc[key])
        if leaf is not None:  # a table's number made negative: no slowdown or time is
            bad = copy.deepcopy(doc)
            parent, k = leaf(bad[key])
            parent[k] = -abs(parent[k]) - 1.0
            yield f"negative-leaf-{key}", bad
    block = doc["compute_ideals"][doc["compute_ideal"]]
    for key in block:
        bad = copy.deepcopy(doc)
        bad[key] = None if bad[key] is not None else 1.5  # the copy edited away from its block
        yield f"copy-differs-{key}", bad


def test_every_damaged_field_is_refused(doc, tmp_path, capsys):
    cases = list(_cases(doc))
    assert len(cases) > 60
    accepted = []
    for i, (name, bad) in enumerate(cases):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(bad))
        out = tmp_path / f"out-{i}"
        rc = main(["plot", "--whatif", str(path), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        if rc != 2:
            accepted.append(name)
            continue
        assert "error" in err and str(path) in err, (name, err)
        assert not out.exists() or not any(out.iterdir()), f"{name}: partial output"
    assert not accepted, f"accepted as good: {accepted}"


def test_the_undamaged_file_draws(doc, tmp_path, capsys):
    path = tmp_path / "whatif.json"
    path.write_text(json.dumps(doc))
    assert main(["plot", "--whatif", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert (tmp_path / "o" / "heatmap.png").stat().st_size > 0
