"""Measure every garbage-collector pause of a rank with gc.callbacks.

Each collection of at least `min_s` is logged with its step, start time (the
tracer's clock), duration and generation, and appended to
`gc/rank<r>.jsonl` at each step end (so a killed run keeps them). The run
folder turns them into run.json's `gc` section and the trace's `gc_pause_s`
column (pause time that fell inside each op).

    monitor = GcMonitor(path); monitor.start(); ...; monitor.flush(step); monitor.stop()
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

from stragglerlab.workloads.tracer import now


class GcMonitor:
    """gc.callbacks hook logging pauses."""

    def __init__(self, path: str | Path, min_s: float = 0.0002) -> None:
        self.path = Path(path)
        self.min_s = min_s
        self.step = -1
        self.paused_s = 0.0
        """Seconds of every collection so far, short ones included (the compute pacer's
        host stall: workloads/pacing.py)."""
        self._t0 = 0.0
        self._pending: list[dict] = []

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = now()
            return
        duration = now() - self._t0
        self.paused_s += duration
        if duration >= self.min_s:
            self._pending.append({"step": self.step, "start": self._t0, "duration_s": duration,
                                  "generation": info.get("generation"),
                                  "collected": info.get("collected")})

    def start(self) -> None:
        """Begin measuring."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        gc.callbacks.append(self._callback)

    def flush(self) -> None:
        """Append the pauses logged so far."""
        if self._pending:
            with open(self.path, "a") as f:
                f.write("".join(json.dumps(p) + "\n" for p in self._pending))
            self._pending.clear()

    def stop(self) -> None:
        """Stop measuring (flushes)."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        self.flush()


def read_pauses(path: str | Path) -> list[dict]:
    """The pauses a monitor wrote (a torn last line is dropped)."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            break
    return out
