"""The monitor's history in the run folder: JSON lines appended atomically, read back on restart.

`monitor/windows.jsonl` holds one analysed window (or one recorded error) per
line; `monitor/alerts.jsonl` and `monitor/alerts-failed.jsonl` one alert each.
A line is appended with one `write` on an O_APPEND descriptor, then fsync'd, so
concurrent readers see whole lines; a line torn by a crash (no trailing
newline, or not JSON) is skipped on read and cut off before the next append,
so the history stays one JSON document per line. A restarted monitor reads the
windows back and resumes after the last analysed step.

    append_line(path, {"schema": ..., "kind": "window", "step": 12, ...})
    lines = read_lines(path)        # whole lines only
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stragglerlab.util.atomic import dumps_json

MAX_HISTORY_BYTES = 512 * 1024 * 1024
"""Largest history file read back (a bigger one is read from its last part)."""


def append_line(path: str | Path, doc: dict) -> None:
    """Append `doc` as one strict-JSON line (NaN -> null), whole or not at all."""
    p = Path(path)
    p.parent.mkdir(exist_ok=True)  # monitor/ only: a deleted run folder is not made again
    data = dumps_json(doc, indent=None)
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:  # a torn last line (a crash mid-append) is cut before the next one
            with open(p, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.ftruncate(fd, _last_newline(p, size))
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_newline(p: Path, size: int) -> int:
    """Length of the file up to and including its last newline (0: none)."""
    with open(p, "rb") as f:
        pos = size
        while pos > 0:
            start = max(0, pos - 65536)
            f.seek(start)
            chunk = f.read(pos - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            pos = start
    return 0


def read_lines(path: str | Path) -> list[dict]:
    """Every whole JSON-object line of a history file ([] when there is none)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - MAX_HISTORY_BYTES))
            raw = f.read()
    except OSError:
        return []
    out = []
    for line in raw.split(b"\n")[:-1]:  # the last piece is empty or a torn line
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def resumable(doc: dict) -> bool:
    """A windows.jsonl line a resumed monitor can take back: an error line with its
    message, a window line with the typed fields it reads (anything else is passed over:
    a history file edited or written by something else)."""
    if doc.get("kind") == "error":
        return isinstance(doc.get("message"), str)
    if doc.get("kind") != "window":
        return True
    ints = [doc.get(k) for k in ("step", "dp_size", "pp_size")]
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints) \
        and isinstance(doc.get("findings", []), list)


SETTINGS_FLAGS = {"window_steps": "--window-steps", "warmup_steps": "--warmup-steps",
                  "dp_size": "--dp", "pp_size": "--pp"}
"""Window-line field -> the monitor flag that sets it: the analysis settings a history was
written with (an older history's window lines lack window_steps and warmup_steps)."""


def settings_conflict(lines: list[dict], given: dict[str, int | None]) -> str | None:
    """Why a monitor given `given` (window-line field -> value; None: not given) cannot
    resume this history: its latest window was analysed with another value (None: it can).
    A field the history does not record (an older one) is not compared."""
    last = next((d for d in reversed(lines) if d.get("kind") == "window"), None)
    if last is None:
        return None
    for name, value in given.items():
        recorded = last.get(name)
        if value is None or not isinstance(recorded, int) or recorded == value:
            continue
        flag = SETTINGS_FLAGS[name]
        return (f"its monitor history (monitor/windows.jsonl, through step {last.get('step')}) "
                f"was analysed with {flag} {recorded}, not {value}; a history holds windows of "
                f"one setting: pass {flag} {recorded} to resume it, or delete the run's "
                "monitor/ folder to analyse the run afresh")
    return None


def last_step(lines: list[dict]) -> int:
    """The last step analysed in a windows history (-1: none)."""
    steps = [d["step"] for d in lines if d.get("kind") == "window"
             and isinstance(d.get("step"), int)]
    return max(steps, default=-1)
