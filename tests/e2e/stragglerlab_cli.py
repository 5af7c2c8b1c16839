"""The CLI run as a user runs it, for the e2e tests: a fresh process, its exit code asserted."""

from __future__ import annotations

import subprocess
import sys


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m stragglerlab ARGS` in a fresh process; fails the test (with the end of its
    stderr) unless it exits 0."""
    proc = subprocess.run([sys.executable, "-m", "stragglerlab", *args], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
