"""Fault scenarios end to end on Ray (slow tier): crash and hang fail the run in time with the
right rank, a SIGKILLed run leaves nothing behind once the next run has started, and a
SIGTERMed one undoes everything itself.

    .venv/bin/python -m pytest -m slow tests/e2e/test_faults_ray.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stragglerlab.host.cgroups import CpuIsolation
from stragglerlab.trace.trace_io import read_trace

pytestmark = pytest.mark.slow


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "stragglerlab", *args]


def our_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("sl-")]


def our_cgroups() -> list[str]:
    base = Path("/sys/fs/cgroup/cpu/stragglerlab")
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.exists() else []


def processes_of(pid: int) -> list[int]:
    """Live processes marked as started by driver `pid` (Ray's and the rank actors)."""
    from stragglerlab.host.residue import _marks

    return [p for p, (mark, _node) in _marks().items()
            if mark is not None and mark.split(":")[0] == str(pid)]


@pytest.mark.parametrize("scenario,victim,kind", [("crash", 1, "worker-died"),
                                                  ("hang", 2, "hang")])
def test_failed_rank_ends_the_run_in_time(tmp_path: Path, scenario: str, victim: int,
                                          kind: str):
    out = tmp_path / scenario
    t0 = time.monotonic()
    proc = subprocess.run(cli("train", "--scenario", scenario, "--out", str(out)),
                          capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["outcome"] == "failed"
    assert (run["error"]["rank"], run["error"]["kind"]) == (victim, kind), run["error"]
    timeout = run["scenario"]["run"]["collective_timeout_s"]
    assert run["error"]["detected_after_s"] < timeout + 30
    assert wall < 150, f"{scenario} took {wall:.0f}s"
    faults = json.loads((out / "faults.json").read_text())
    assert faults[0]["kind"] == scenario and faults[0]["measured"]["failed_rank"] == victim
    df, _ = read_trace(out / "trace.parquet", out / "meta.yaml")  # steps before the fault
    assert set(df["step"].unique()) == set(range(3, 5))  # three warm-up steps (0-2)


def killed_mid_injection(tmp_path: Path, sig: int = signal.SIGKILL,
                         ) -> tuple[int, set[str], set[str]]:
    """Start a DP 2 x PP 2 run with a throttled link, send its driver `sig` once
    step 3 is done (the first traced step, after three warm-up steps).

    Returns (driver pid, our namespaces before, our cgroups before) once the driver has
    exited (its exit status is in the `returncode` attribute of this function); after a
    SIGKILL, Ray, the ranks, the namespaces and the cgroups of the run are left behind.
    """
    config = tmp_path / "long.yaml"
    config.write_text("scenarios:\n  long-throttle:\n    parallel: {dp: 2, pp: 2}\n"
                      "    run: {steps: 300}\n    faults:\n      - {kind: net-throttle, "
                      "targets: [{dp_rank: 0, stage: 1}], params: {rate_mbit: 50}}\n")
    out = tmp_path / "killed"
    before_ns, before_cg = set(our_namespaces()), set(our_cgroups())
    driver = subprocess.Popen(cli("train", "--scenario", "long-throttle", "--config",
                                  str(config), "--out", str(out)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and driver.poll() is None:
            try:
                if json.loads((out / "status" / "rank2.json").read_text())["step"] >= 3:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        else:
            pytest.fail("the run never reached step 3")
        assert set(our_namespaces()) - before_ns  # mid-injection: namespaces exist
        assert set(our_cgroups()) - before_cg
        os.kill(driver.pid, sig)
        killed_mid_injection.returncode = driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    return driver.pid, before_ns, before_cg


@pytest.mark.skipif(os.geteuid() != 0 or not CpuIsolation.available()[0],
                    reason="needs root, cgroup v1 and network namespaces")
def test_sigkilled_run_leaves_no_residue_after_the_next_start(tmp_path: Path):
    driver_pid, before_ns, before_cg = killed_mid_injection(tmp_path)
    # The next run cleans up what the killed one left, as it starts.
    nxt = subprocess.run(cli("train", "--scenario", "clean-dp2-pp2", "--steps", "4",
                             "--out", str(tmp_path / "next")), capture_output=True, text=True,
                         timeout=300)
    assert nxt.returncode == 0, nxt.stderr[-3000:]
    assert set(our_namespaces()) <= before_ns
    assert set(our_cgroups()) <= before_cg
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    assert "tbf" not in qdiscs  # the host's own interfaces were never shaped
    assert processes_of(driver_pid) == []


@pytest.mark.skipif(os.geteuid() != 0 or not CpuIsolation.available()[0],
                    reason="needs root, cgroup v1 and network namespaces")
def test_sigtermed_run_undoes_its_faults_itself(tmp_path: Path):
    driver_pid, before_ns, before_cg = killed_mid_injection(tmp_path, signal.SIGTERM)
    assert killed_mid_injection.returncode == 143
    # No next run and no `stragglerlab clean`: the terminated run undid its own setup.
    assert set(our_namespaces()) <= before_ns
    assert set(our_cgroups()) <= before_cg
    assert processes_of(driver_pid) == []
    record = json.loads((tmp_path / "killed" / "run.json").read_text())
    assert record["outcome"] == "failed" and record["error"]["kind"] == "interrupted"
    assert record["error"]["message"] == "SIGTERM"
    killed = tmp_path / "killed"
    partial, _ = read_trace(killed / "trace.parquet", killed / "meta.yaml")
    assert len(partial) > 0  # the steps traced before the signal
