"""Waiting between two looks: until the poll interval passes, or sooner when a rank's status
file lands (a step may be complete now).

    wait_for_news(stop, poll_s, lambda: status_mark(run_dir))

A look reads every rank's status file and trace part (1,024 of each at 1,024 workers), so
the monitor looks every --poll seconds, not continuously; between looks it stats the
status folder every NEWS_EVERY_S. Every status write sets the folder's mtime
(run_folder.write_status): a rank's as it ends a step, the node stream's receiver's once
per round of the nodes' batches. Once the folder has changed and then stayed the same
for one NEWS_EVERY_S, the wait ends: the step's statuses have landed, and the look comes
then rather than up to --poll later. A change the folder's clock cannot show (two marks
within one tick of a coarse mtime) only costs the wait it always had.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from stragglerlab.run.run_folder import STATUS_DIR

NEWS_EVERY_S = 0.05
"""How often a waiting monitor stats the status folder: also how long it must stay
unchanged after a change (the ranks' statuses of one step land together)."""


def status_mark(run_dir: Path) -> int | None:
    """The status folder's mtime (ns), None without one: what changes as a status lands."""
    try:
        return os.stat(run_dir / STATUS_DIR).st_mtime_ns
    except OSError:
        return None


def wait_for_news(stop: threading.Event, poll_s: float, mark: Callable[[], object]) -> None:
    """Return when `stop` is set, `poll_s` passed, or `mark()` changed and then held for
    NEWS_EVERY_S (module doc)."""
    deadline = time.monotonic() + poll_s
    seen, changed = mark(), False
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or stop.wait(min(NEWS_EVERY_S, left)):
            return
        now = mark()
        if now != seen:
            seen, changed = now, True
        elif changed:
            return
