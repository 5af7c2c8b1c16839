"""Measure one rank's CPU time, run-queue wait and the host's busy time per step.

Reads the process's schedstat totals at each step start and end and appends the
difference to `cpu/rank<r>.jsonl` at each step end, beside the GC log. Two reads of a
few /proc files per step: tens of microseconds.

    monitor = RunQueueMonitor(path); monitor.begin(step); ...; monitor.end(step); monitor.flush()
"""

from __future__ import annotations

from pathlib import Path

from stragglerlab.run.run_queue_log import StepWait, append_records, host_busy_s, thread_totals
from stragglerlab.workloads.tracer import now


class RunQueueMonitor:
    """Per-step CPU time and run-queue wait of this process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._start: tuple[float, float, float, float | None] | None = None
        self._pending: list[StepWait] = []

    def begin(self) -> None:
        """Mark a step's start."""
        totals = thread_totals()
        self._start = None if totals is None else (*totals, now(), host_busy_s())

    def end(self, step: int) -> None:
        """Mark the step's end and keep its record."""
        if self._start is None:
            return
        totals = thread_totals()
        if totals is None:
            return
        cpu0, wait0, t0, busy0 = self._start
        busy = host_busy_s()
        self._pending.append(StepWait(
            step=step, cpu_s=max(totals[0] - cpu0, 0.0), wait_s=max(totals[1] - wait0, 0.0),
            wall_s=max(now() - t0, 0.0),
            host_busy_s=None if busy is None or busy0 is None else max(busy - busy0, 0.0)))
        self._start = None

    def flush(self) -> None:
        """Append the records kept so far."""
        append_records(self.path, self._pending)
        self._pending.clear()
