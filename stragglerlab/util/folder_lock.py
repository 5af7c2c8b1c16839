"""One writer per folder: an advisory lock (flock) on a lock file inside the folder a
verb writes, held while it writes. A second writer of the same folder is refused at
once, with one message naming the holder's verb and pid (written into the lock file),
instead of two verbs interleaving their renames into one folder.

    with hold(out, "whatif"):              # a scope of its own
        ...write the outputs...

    with release_at_end():                 # the CLI's main, around a verb's run
        lock_folder(out, "whatif")         # the verb, once its --out is checked

The kernel drops a flock when its holder dies, SIGKILL included, so a lock file left by
a killed writer blocks nobody: the next writer takes the lock and rewrites the file. A
writer that ends removes the lock file (and the folder, when the lock made it and
nothing else was written), so the file stays behind only after a kill; it is a dot file
no verb lists, owns or reads as a record.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from stragglerlab.util.errors import InputError

LOCK_NAME = ".stragglerlab.lock"
"""The lock file inside a folder a verb writes."""
BUSY_HINT = "wait for it to finish (or stop it), or pass another --out folder"
"""What a refused writer is told to do, unless its caller says otherwise."""
_OPEN_TRIES = 100
"""Opens of the lock file before giving up when each one finds the file just replaced
(a holder removing it as it ends): only a folder churning without end gets there."""


@dataclass(kw_only=True, frozen=True)
class Holder:
    """Who holds a folder's lock, as written into its lock file."""

    pid: int | None
    """Process id (None: the file did not say)."""
    verb: str
    """The verb writing ('?' when the file did not say)."""

    @classmethod
    def parse(cls, text: str) -> Holder:
        """The holder a lock file's text names; '?' for what it does not (a holder that
        has not written it yet, or a file of another shape)."""
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            return cls(pid=None, verb="?")
        pid, verb = doc.get("pid"), doc.get("verb")
        return cls(pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                   verb=verb if isinstance(verb, str) and verb else "?")


def only_the_lock(folder: Path) -> bool:
    """Whether `folder` holds its lock file and nothing else (a folder the lock made)."""
    try:
        return [e.name for e in os.scandir(folder)] == [LOCK_NAME]
    except OSError:
        return False


def _made(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, outermost first: the
    folders taking the lock creates."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    return missing[::-1]


@contextmanager
def hold(folder: str | Path, verb: str, *, name: str = LOCK_NAME,
         hint: str = BUSY_HINT) -> Iterator[Path]:
    """Hold `folder`'s lock (the file `name` in it) while the block runs; yields the lock
    file's path. `folder` is created when missing, and removed again at the end when it
    holds nothing else. InputError at once when another process holds the lock (naming
    its verb and pid, and `hint`), or when the lock file cannot be made."""
    folder = Path(folder)
    made = _made(folder)
    path = folder / name
    _TAKEN.append(_key(folder))  # before the lock: a full disk may refuse even that
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _acquire(path, folder, verb, hint)
    except OSError as e:
        _remove_empty(made)
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise  # the CLI's full-disk message
        raise InputError(f"cannot hold the {verb}'s lock file in {folder} ({e.strerror}); "
                         f"{name} there must be a file this user can write") from None
    except InputError:
        _remove_empty(made)
        raise
    key = _key(folder)
    _HELD[key] = _HELD.get(key, 0) + 1
    try:
        yield path
    finally:
        _HELD[key] -= 1
        if not _HELD[key]:
            del _HELD[key]
        try:  # unlinked while held (see _acquire), and only while it is this lock's file
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()
        except OSError:
            pass
        os.close(fd)
        _remove_empty(made)


_HELD: dict[str, int] = {}
"""The folders whose lock this process holds (real paths), with how many holds."""
_TAKEN: list[str] = []
"""The folders locked since the last `release_at_end` scope began (see `taken`)."""


def _key(folder: str | Path) -> str:
    return os.path.realpath(folder)


def writing(folder: str | Path) -> None:
    """Record `folder` as one this process writes without its lock (a verb whose writers may
    share the folder), so a message about a failed write names it as `taken` does."""
    _TAKEN.append(_key(folder))


def taken() -> list[str]:
    """The folders whose lock this process took, or tried to take (real paths, in order),
    since the last `release_at_end` scope began, released or not: what a message about a
    failed write names when the error does not."""
    return list(_TAKEN)


def holds(folder: str | Path) -> bool:
    """Whether this process holds `folder`'s lock: then no other writer is at work there,
    and what a killed writer left (staging folders, temporary files) may be removed."""
    return _key(folder) in _HELD


HOLDER_READS = 50
"""How many times a refused writer reads the lock file for its holder's record, HOLDER_WAIT_S
apart: the holder writes the record just after it takes the lock, so a writer refused in
between would otherwise name an unknown holder ('another ?')."""
HOLDER_WAIT_S = 0.01
"""Seconds between those reads (half a second in all at most)."""


def _holder_of(fd: int) -> Holder:
    """The lock's holder as the lock file names it, once it does (see HOLDER_READS)."""
    for _ in range(HOLDER_READS):
        holder = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
        if holder.pid is not None:
            break
        time.sleep(HOLDER_WAIT_S)
    return holder


def _acquire(path: Path, folder: Path, verb: str, hint: str) -> int:
    """A descriptor of `path` holding its exclusive flock, with this process written in."""
    for _ in range(_OPEN_TRIES):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            holder = _holder_of(fd)
            os.close(fd)
            who = f"pid {holder.pid}" if holder.pid is not None else "pid ?"
            raise InputError(f"another {holder.verb} (`stragglerlab {holder.verb}`, {who}) is "
                             f"writing {folder} now, and a second writer would mix their "
                             f"files; {hint}") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it as it ended: lock the file now at `path`
            os.close(fd)
            continue
        record = json.dumps({"pid": os.getpid(), "verb": verb}).encode() + b"\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)  # a full disk refuses even this
        except OSError:
            path.unlink(missing_ok=True)  # this lock's own file: checked just above
            os.close(fd)
            raise
        return fd
    raise InputError(f"cannot hold the {verb}'s lock file in {folder}: it was replaced "
                     f"{_OPEN_TRIES} times while being taken; {hint}")


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders of `made` (innermost first) that are empty."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return  # holds something (or is gone): so do its parents


_SCOPES: list[ExitStack] = []
"""The open `release_at_end` scopes, innermost last."""
_PROCESS = ExitStack()
"""Locks taken outside any scope: held until the process ends."""


@contextmanager
def release_at_end() -> Iterator[None]:
    """A scope whose `lock_folder` locks are released when it ends (the CLI's main wraps
    a verb's run in one, so a verb takes its lock with one call once its --out is
    checked, and a program calling main many times never holds a stale one)."""
    _TAKEN.clear()
    with ExitStack() as stack:
        _SCOPES.append(stack)
        try:
            yield
        finally:
            _SCOPES.remove(stack)


def lock_folder(folder: str | Path, verb: str, *, name: str = LOCK_NAME,
                hint: str = BUSY_HINT) -> Path:
    """Take `folder`'s lock (see `hold`) until the innermost `release_at_end` scope ends
    (the process, outside any); returns the lock file's path."""
    stack = _SCOPES[-1] if _SCOPES else _PROCESS
    return stack.enter_context(hold(folder, verb, name=name, hint=hint))
