"""SIGTERM taken down the Ctrl-C path, and which of the two stopped a run.

`kill PID` (a scheduler, a timeout, a workflow manager) must undo injected faults and
host setup just as Ctrl-C does, so the CLI installs `on_sigterm`, which raises
`Terminated`, a KeyboardInterrupt. Libraries on the way (Ray's blocking calls among
them) may catch it and raise a plain KeyboardInterrupt in its place, so which signal
arrived is also kept here, and `interrupt_message` reads it from there.
"""

from __future__ import annotations

import contextlib
import signal
import threading

_sigterm_received = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is when it arrives."""


def on_sigterm(signum, frame) -> None:
    """The SIGTERM handler: note the signal, then interrupt like Ctrl-C."""
    _sigterm_received.set()
    raise Terminated("SIGTERM")


def install_sigterm_handler() -> None:
    """Install `on_sigterm` (only the main thread may set signal handlers)."""
    _sigterm_received.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)


def interrupt_message(exc: KeyboardInterrupt) -> str:
    """'SIGTERM' or 'Ctrl-C': what stopped the run, for run.json and the exit message."""
    return "SIGTERM" if _sigterm_received.is_set() or isinstance(exc, Terminated) else "Ctrl-C"


@contextlib.contextmanager
def keep_sigterm_handler():
    """Keep the caller's SIGTERM handler across `ray.init`, which replaces it with one that
    exits with status 1 and skips our cleanup path. Ray's own handler stays when the
    caller had none of its own."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and callable(before):
            signal.signal(signal.SIGTERM, before)
