"""Per-rank CPU isolation (workloads.isolation): quotas bite, change live, and clean up.

Skipped where cgroup v1 CPU quotas are unavailable (not root, no v1 cpu controller).
Two busy-loop subprocesses at 0.5 and 0.25 cores use 0.75 of the 2 cores, so they
do not contend: each one's CPU time over a 1 s window measures its quota alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from stragglerlab.host.cgroups import STATE_DIR, CpuIsolation, cleanup_stale
from stragglerlab.util.errors import InputError

OK, WHY = CpuIsolation.available()
pytestmark = pytest.mark.skipif(not OK, reason=f"CPU isolation unavailable: {WHY}")

# Busy loop that ends on its own after 3.5 s wall even if the test dies before killing it.
BURN = "import time\nt = time.monotonic() + 3.5\nwhile time.monotonic() < t: pass\n"
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """utime + stime of a process, s (10 ms resolution: fine over a 1 s window)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _cores(pids: list[int], window_s: float = 1.0) -> list[float]:
    """CPU time each process got over `window_s` of wall time, in cores."""
    c0, t0 = [_cpu_s(p) for p in pids], time.monotonic()
    time.sleep(window_s)
    c1, t1 = [_cpu_s(p) for p in pids], time.monotonic()
    return [(b - a) / (t1 - t0) for a, b in zip(c0, c1)]


def _run_id() -> str:
    return f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_shares_enforced_changed_live_and_cleaned_up():
    procs = []
    iso = CpuIsolation.create(_run_id(), n_ranks=2, cores_per_rank=0.5)
    try:
        procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
        iso.assign(0, procs[0].pid)
        iso.assign(1, procs[1].pid)
        iso.set_share(1, 0.25)
        assert iso.share(0) == 0.5 and iso.share(1) == 0.25
        time.sleep(0.2)  # interpreter start-up
        got = _cores([p.pid for p in procs])
        print(f"shares 0.5 / 0.25 -> measured {got[0]:.3f} / {got[1]:.3f} cores")
        assert got[0] == pytest.approx(0.5, rel=0.2)
        assert got[1] == pytest.approx(0.25, rel=0.2)
        assert iso.cpu_stat(0)["nr_throttled"] > 0  # the quota, not the loop, limits it

        iso.set_share(0, 0.25)  # what a slow-worker injector does, mid-run
        time.sleep(0.05)
        got = _cores([procs[0].pid])
        print(f"rank 0 lowered to 0.25 -> measured {got[0]:.3f} cores")
        assert got[0] == pytest.approx(0.25, rel=0.2)
        usage = iso.usage_s(0)
        assert usage is None or usage == pytest.approx(_cpu_s(procs[0].pid), abs=0.1)

        # Cleanup with the processes still running: they move back to the root cgroup.
        assert iso.cleanup() == []
        assert iso.cleanup() == []  # idempotent
        assert not iso.cpu_dir.exists() and not (iso.acct_dir and iso.acct_dir.exists())
        assert not iso.state_file.exists()
        cg = Path(f"/proc/{procs[0].pid}/cgroup").read_text()
        assert "stragglerlab" not in cg
    finally:
        for p in procs:
            p.kill()
            p.wait()
        iso.cleanup()


def test_bad_shares_raise_input_error():
    with CpuIsolation.create(_run_id(), n_ranks=2, cores_per_rank=0.5) as iso:
        for cores in (0, -1, 0.05):  # 0.05 x 10 ms is under the kernel's 1 ms quota floor
            with pytest.raises(InputError, match="minimum"):
                iso.set_share(0, cores)
        with pytest.raises(InputError, match="add up to"):
            iso.set_share(0, os.cpu_count())
        with pytest.raises(InputError, match="rank must be"):
            iso.set_share(2, 0.5)
        assert iso.share(0) == 0.5
    assert not iso.cpu_dir.exists()
    with pytest.raises(InputError, match="period_us"):
        CpuIsolation.create(_run_id(), 2, 0.5, period_us=500)
    with pytest.raises(InputError, match="run_id"):
        CpuIsolation.create("../escape", 2, 0.5)


def test_cleanup_stale_removes_only_dead_runs_it_owns(tmp_path):
    dead = CpuIsolation.create(_run_id(), n_ranks=2, cores_per_rank=0.25)
    live = CpuIsolation.create(_run_id(), n_ranks=1, cores_per_rank=0.25)
    foreign = tmp_path / "not-a-stragglerlab-cgroup"
    foreign.mkdir()
    bogus = STATE_DIR / f"{_run_id()}.json"
    try:
        # Simulate a SIGKILLed creator: its side file now names a dead pid.
        rec = json.loads(dead.state_file.read_text())
        dead.state_file.write_text(json.dumps({**rec, "pid": _dead_pid()}))
        # A side file pointing outside .../stragglerlab/ must never be acted on.
        bogus.write_text(json.dumps({"pid": _dead_pid(), "run_dirs": [str(foreign)]}))

        removed = cleanup_stale()
        assert dead.run_id in removed and live.run_id not in removed
        assert not dead.cpu_dir.exists() and not dead.state_file.exists()
        assert live.cpu_dir.exists() and live.state_file.exists()
        assert foreign.exists() and bogus.exists()
    finally:
        bogus.unlink(missing_ok=True)
        dead.cleanup()
        live.cleanup()
    assert not live.cpu_dir.exists()
