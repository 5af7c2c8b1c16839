"""The core install alone analyses a job: no torch, no Ray, no Snakemake (slow tier).

`pip install stragglerlab` must fit an environment that has its own (CUDA) torch,
so the core (whatif, detect, plot, the Python API) depends on none of the three.
This builds the wheel, installs it with its core dependencies into a fresh venv
(the versions of constraints.txt, as CI and the quickstart use), checks that
torch, ray and snakemake are absent, and runs the newcomer's first minute from
another folder: whatif, detect and the heatmap of `examples/slow-worker`.

    .venv/bin/python -m pytest -m slow tests/e2e/test_core_install.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "slow-worker"
ABSENT = ("torch", "ray", "snakemake")


def sh(*cmd, cwd=None, timeout=600, check=True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> dict:
    """A fresh venv holding the wheel and its core dependencies only."""
    tmp = tmp_path_factory.mktemp("core")
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
       "-w", tmp / "dist", REPO)
    (wheel,) = (tmp / "dist").glob("stragglerlab-*.whl")
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    sh(py, "-m", "pip", "install", "-q", "-c", REPO / "constraints.txt", wheel, timeout=900)
    cwd = tmp / "newcomer"
    cwd.mkdir()
    shutil.copytree(EXAMPLE, cwd / "slow-worker")
    return {"py": py, "cli": venv / "bin" / "stragglerlab", "cwd": cwd}


def test_core_has_no_torch_ray_or_snakemake(core):
    for name in ABSENT:
        proc = sh(core["py"], "-c", f"import {name}", check=False)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, name


def test_core_runs_whatif_detect_and_draws_the_heatmap(core):
    cli, cwd = core["cli"], core["cwd"]
    out = sh(cli, "whatif", "--run", "slow-worker", cwd=cwd).stdout
    assert "slowdown S" in out
    assert (cwd / "slow-worker" / "whatif" / "whatif.json").stat().st_size > 0
    found = sh(cli, "detect", "--run", "slow-worker", "--detector", "whatif", cwd=cwd)
    findings = list((cwd / "slow-worker").glob("detect*/**/*.json"))
    assert findings, f"detect wrote nothing under slow-worker/detect*: {found.stdout}"
    sh(cli, "plot", "--run", "slow-worker", cwd=cwd)
    png = cwd / "slow-worker" / "plot" / "heatmap.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_python_api_on_the_core(core):
    code = ("import stragglerlab; job = stragglerlab.open('slow-worker'); "
            "print(round(float(job.summary()['slowdown']), 3)); "
            "print(job.detect('whatif')[['root_cause', 'dp_rank', 'stage']].to_csv(index=False))")
    out = sh(core["py"], "-c", code, cwd=core["cwd"]).stdout.splitlines()
    assert float(out[0]) > 1.1  # the example's slow worker costs the job time
    assert any(line.startswith("slow-worker,") for line in out[1:]), out


def test_example_notebook_on_the_core(core, tmp_path):
    """The example notebook from a fresh kernel of the core venv (plus the notebook runner)."""
    py = core["py"]
    sh(py, "-m", "pip", "install", "-q", "-c", REPO / "constraints.txt", "nbclient", "nbformat",
       "ipykernel", timeout=900)
    nb_dir = tmp_path / "examples" / "notebook"
    nb_dir.mkdir(parents=True)
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "slow-worker")
    src = REPO / "examples" / "notebook" / "stragglerlab-api.ipynb"
    shutil.copy(src, nb_dir)
    code = ("import nbformat, nbclient, sys; p = sys.argv[1]; nb = nbformat.read(p, 4); "
            "nbclient.NotebookClient(nb, timeout=300, kernel_name='python3', resources="
            "{'metadata': {'path': sys.argv[2]}}).execute(); "
            "print(sum('image/png' in o.get('data', {}) for c in nb.cells "
            "if c.cell_type == 'code' for o in c.outputs))")
    out = sh(py, "-c", code, nb_dir / src.name, nb_dir, cwd=tmp_path).stdout
    assert int(out.strip().splitlines()[-1]) >= 1  # the heatmap was drawn
    for name in ABSENT:  # and the runner pulled in none of them
        assert sh(py, "-c", f"import {name}", check=False).returncode != 0, name
