"""Atomic file writes: write to a temporary file beside the target, then rename.

A crashed or killed writer never leaves a half-written output behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) then rename tmp_path onto path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        # mkstemp creates 0600 files; give outputs the usual umask-based mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write text atomically."""

    def _write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, _write)


def atomic_write_json(path: str | Path, obj: object, indent: int | None = 2) -> None:
    """Write JSON atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")
