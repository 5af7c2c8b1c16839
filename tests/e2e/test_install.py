"""A non-editable install works as a stranger uses it (slow tier).

Builds the wheel, installs it into a fresh venv (its dependencies taken from
this environment's site-packages, so nothing is downloaded), and runs the CLI
from a folder that holds its own `analysis/` and `figures/` packages: ours
must not be shadowed, and site-packages must hold no top-level `analysis`,
`figures`, `injectors` or `workloads`.

    .venv/bin/python -m pytest -m slow tests/e2e/test_install.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "slow-worker"
OURS = ("analysis", "figures", "injectors", "workloads")


def sh(*cmd, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A fresh venv with the built wheel installed (not editable)."""
    tmp = tmp_path_factory.mktemp("install")
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
       "-w", tmp / "dist", REPO, timeout=600)
    (wheel,) = (tmp / "dist").glob("stragglerlab-*.whl")
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    site = Path(sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())
    # Dependencies from this environment; a plain path line adds no editable finder of ours.
    (site / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sh(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "-q", wheel)
    user = tmp / "user project"
    for pkg in ("analysis", "figures"):
        (user / pkg).mkdir(parents=True)
        (user / pkg / "__init__.py").write_text("raise ImportError('the user package was used')\n")
    return {"py": py, "bin": venv / "bin", "site": site, "cwd": user}


def test_site_packages_holds_one_namespace(installed):
    names = {p.name for p in installed["site"].iterdir()}
    assert "stragglerlab" in names
    stray = names & set(OURS)
    assert not stray, f"top-level packages of ours in site-packages: {stray}"
    pkg = installed["site"] / "stragglerlab"
    for sub in (*OURS, "cli", "host", "workflow"):
        assert (pkg / sub / "__init__.py").is_file() or sub == "config", sub
    assert (pkg / "config" / "scenarios.yaml").is_file()  # package data


def test_cli_runs_from_a_folder_with_its_own_analysis_package(installed):
    cwd, bindir, py = installed["cwd"], installed["bin"], installed["py"]
    version = sh(bindir / "stragglerlab", "--version", cwd=cwd).stdout
    assert version.startswith("stragglerlab ")
    listed = sh(bindir / "stragglerlab", "list", "scenarios", cwd=cwd).stdout
    assert "clean-dp2-pp2" in listed
    for i, launcher in enumerate(([bindir / "stragglerlab"], [py, "-m", "stragglerlab"])):
        sh(*launcher, "whatif", "--trace", EXAMPLE / "trace.parquet", "--meta",
           EXAMPLE / "meta.yaml", "--out", f"w{i}", "--quiet", cwd=cwd)
        assert (cwd / f"w{i}" / "whatif.json").stat().st_size > 0
    where = sh(py, "-c", "import stragglerlab.analysis as a; print(a.__file__)", cwd=cwd).stdout
    assert str(installed["site"]) in where


def test_installed_package_trains(installed):
    cwd = installed["cwd"]
    sh(installed["bin"] / "stragglerlab", "train", "--scenario", "clean-dp2-pp2", "--steps", "4",
       "--out", "r", "--quiet", cwd=cwd, timeout=300)
    for name in ("trace.parquet", "meta.yaml", "faults.json", "run.json"):
        assert (cwd / "r" / name).stat().st_size > 0, name
