"""Progress output of the verbs: on stderr, silenced by --quiet, never the result.

On a terminal a `rich.progress` display (a bar with ETA per counted task, a
spinner per open-ended one, log lines above them); elsewhere (CI logs, a file,
a pipe) plain lines, `[  12.3s] message`, and for a counted task one line at
its start, then at most one every PLAIN_EVERY_S seconds, then one at its end,
so a log stays readable. With --quiet nothing at all, except `error`, which
always prints. The result summary is not progress: verbs print it to stdout
after the `with` block.

    with Reporter(quiet=args.quiet) as progress:
        progress.log("read 1,234 ops")             # a line (a library `progress` callback)
        figures = progress.task("figures", total=len(names))
        for name in names:
            ...
            figures.advance(note=name)             # bar + ETA; plain: an occasional line
        steps = progress.task("step", total=31)
        launch(..., progress=steps)     # "step 3/31  loss ..." advances it; other text: a line
    print(summary)                                 # stdout, --quiet or not

Library code reports through a `progress(msg: str)` callback; a message that
starts `<what> <i>/<n>` (`step 3/31  loss 2.1`, `rank trace 2/4 parsed: x.json`)
sets a counted task's count when the task is that callback, any other is a line.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import TextIO

PLAIN_EVERY_S = 10.0
"""Plain output: the fewest seconds between two lines of one counted task."""
COUNT = re.compile(r"^[A-Za-z][\w -]*? (\d+)/(\d+)(?:\s+|$)")
"""A callback message that is a count: `<what> <i>/<n> [note]`."""


def is_live(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal a live display may redraw."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
    except ValueError:  # a closed stream
        return False


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Task:
    """One piece of work of a `Reporter`: counted (`total`) or open-ended (a spinner)."""

    def __init__(self, reporter: Reporter, description: str, total: int | None):
        self.reporter = reporter
        self.description = description
        self.total = total
        self.completed = 0
        self.t0 = time.perf_counter()
        self._printed_at: float | None = None
        self._id = None
        if reporter.display is not None:
            self._id = reporter.display.add_task(description, total=total, note="")

    def __call__(self, msg: str) -> None:
        """The `progress(msg)` callback of library code: a count (`step 3/31 ...`) updates a
        counted task; any other message is a log line (and the spinner's note)."""
        m = COUNT.match(msg) if self.total is not None else None
        if m:
            self.update(completed=int(m[1]), total=int(m[2]), note=msg[m.end():].strip())
            return
        self.reporter.log(msg)
        if self._id is not None:
            self.reporter.display.update(self._id, note=msg)

    def advance(self, n: int = 1, note: str | None = None) -> None:
        """`n` more units done."""
        self.update(completed=self.completed + n, note=note)

    def update(self, completed: int | None = None, total: int | None = None,
               note: str | None = None) -> None:
        """Set how much is done (and the total, and a note shown beside the count)."""
        if completed is not None:
            self.completed = completed
        if total is not None:
            self.total = total
        if self.reporter.quiet:
            return
        if self._id is not None:
            fields = {} if note is None else {"note": note}
            self.reporter.display.update(self._id, completed=self.completed, total=self.total,
                                         **fields)
            return
        now = time.perf_counter()
        done = self.total is not None and self.completed >= self.total
        if self._printed_at is not None and not done and now - self._printed_at < \
                self.reporter.every_s:
            return
        self._printed_at = now
        self.reporter.log(self.line(now, note))

    def line(self, now: float, note: str | None) -> str:
        """The plain line: `figures 3/17  fig05 ... (ETA 1m05s)`."""
        count = f"{self.completed}/{self.total}" if self.total is not None else \
            str(self.completed)
        text = f"{self.description} {count}" + (f"  {note}" if note else "")
        elapsed = now - self.t0
        if self.total is not None and self.completed >= self.total:
            return f"{text}  (done in {duration(elapsed)})"
        if self.total is not None and self.completed > 0:
            eta = elapsed / self.completed * (self.total - self.completed)
            return f"{text}  (ETA {duration(eta)})"
        return text


class Reporter:
    """The progress output of one verb run (a context manager); see the module doc."""

    def __init__(self, quiet: bool = False, stream: TextIO | None = None,
                 live: bool | None = None, every_s: float = PLAIN_EVERY_S):
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.live = (not quiet) and (is_live(self.stream) if live is None else live)
        self.every_s = every_s
        self.t0 = time.perf_counter()
        self.display = None

    def __enter__(self) -> Reporter:
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self.stream, force_terminal=True, highlight=False)
            # stdout is the result's: never redirected into the display on stderr.
            self.display = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                TimeRemainingColumn(), TextColumn("{task.fields[note]}", markup=False),
                console=console, redirect_stdout=False, redirect_stderr=True)
            self.display.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.display is not None:
            self.display.stop()
            self.display = None

    def task(self, description: str, total: int | None = None) -> Task:
        """A new piece of work: `total` units (bar, ETA) or, without, a spinner."""
        return Task(self, description, total)

    def log(self, msg: str) -> None:
        """One progress line, `[elapsed] msg` (nothing with --quiet)."""
        if self.quiet:
            return
        self._print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}")

    __call__ = log

    def error(self, msg: str) -> None:
        """A diagnostic that is not progress (a failed part, a traceback): always printed."""
        self._print(msg)

    def _print(self, text: str) -> None:
        try:
            if self.display is not None:
                self.display.console.print(text, markup=False, highlight=False,
                                           soft_wrap=True)
            else:
                print(text, file=self.stream, flush=True)
        except (BrokenPipeError, ValueError):
            # Nobody reads stderr any more (`2>&1 >/dev/null | true`): the work goes on and
            # its exit status stays its own; progress was never the result.
            self.quiet, self.display = True, None
            self.stream = open(os.devnull, "w")  # noqa: SIM115 - lives as the reporter
