"""The example notebook runs from a fresh kernel: open, whatif, detect, heatmap, score.

    .venv/bin/python -m pytest tests/unit/test_notebook.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs the [dev] extra")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs the [dev] extra")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook" / "stragglerlab-api.ipynb"


def run_notebook(path: Path) -> nbformat.NotebookNode:
    """Execute the notebook in a fresh kernel, in its own folder; raise on any cell error."""
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def test_example_notebook_runs_and_shows_the_heatmap():
    nb = run_notebook(NOTEBOOK)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no heatmap drawn"
    text = "\n".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "slowdown" in text and "slow-worker" in text
