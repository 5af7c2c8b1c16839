"""Atomic file writes: write to a temporary file beside the target, then rename.

A crashed or killed writer never leaves a half-written output behind; a verb
that writes several files stages them in a temporary sibling folder
(`staged_folder`) and moves them into its --out folder only when all are written:
in one rename when the folder is new or holds only the verb's own files (renameat2's
exchange), else file by file. A writer holding the folder's lock
(stragglerlab.util.folder_lock) removes what a killed writer left there first.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from stragglerlab.util.folder_lock import LOCK_NAME, holds, only_the_lock


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) then rename tmp_path onto path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if holds(target.parent):  # no other writer here: a temporary file is a killed one's
        _remove_left_over(target.parent, target.name, folders=False)
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


def dumps_json(obj: object, indent: int | None = 2) -> bytes:
    """Strict JSON bytes (NaN and infinities become null), newline-terminated.

    orjson encodes a large whatif.json (dp=1024: 2.2M values) about 20x faster
    than the json module; numpy scalars and arrays, and int dict keys, are
    written as json would write them. Anything orjson cannot encode falls back
    to the json module, with non-finite numbers still written as null.
    """
    import orjson

    opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
    if indent:
        opts |= orjson.OPT_INDENT_2
    try:
        return orjson.dumps(obj, option=opts)
    except TypeError:
        text = json.dumps(_finite(obj), indent=indent, default=_plain, allow_nan=False)
        return (text + "\n").encode()


def _finite(obj: object) -> object:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _plain(obj: object) -> object:
    """numpy scalars and arrays as Python numbers and lists (the json module's default hook)."""
    tolist = getattr(obj, "tolist", None)
    if tolist is None:
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")
    return _finite(tolist())


def atomic_write_json(path: str | Path, obj: object, indent: int | None = 2) -> None:
    """Write strict JSON atomically (see `dumps_json`)."""
    data = dumps_json(obj, indent)

    def _write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, _write)


@contextmanager
def staged_folder(out: str | Path, owns: Iterable[str] = ()) -> Iterator[Path]:
    """A temporary sibling folder to write a verb's outputs into, moved into `out` at the end.

    On success every entry is moved into `out` (created if needed; files of the
    same name are replaced, other files in `out` are kept); on any error the
    temporary folder is removed and `out` is left as it was, so a verb never
    leaves partial output. `owns`: glob patterns (relative to `out`, e.g.
    "whatif.json", "artifact-format/*.json", "fig03_waste_cdf-*.png") of the files
    the verb writes; those of an earlier run that this one did not write are
    removed from `out` (stale outputs), files matching none are never touched.
    When `out` is new, or holds nothing but files matching `owns` (and the writer's
    lock file), the staged folder takes its place in one rename: a kill at any point
    leaves the old outputs or the new, never a mix.

        with staged_folder(args.out, owns=OUTPUTS) as tmp:
            atomic_write_json(tmp / "whatif.json", doc)     # ... every output
    """
    target = Path(out)
    anchor = target.parent
    while not anchor.exists():  # nothing is created above out until the commit
        anchor = anchor.parent
    if anchor == target.parent and holds(target):  # a staging folder there is a killed one's
        _remove_left_over(anchor, target.name or "out", folders=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name or 'out'}.", suffix=".tmp", dir=anchor))
    try:
        yield tmp
        target.parent.mkdir(parents=True, exist_ok=True)
        umask = os.umask(0)
        os.umask(umask)
        if not target.exists():
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders
            os.replace(tmp, target)
            return
        if only_the_lock(target):  # new but for the writer's lock: still all at once
            os.chmod(tmp, 0o777 & ~umask)
            _replace_keeping_the_lock(tmp, target)
            return
        if _only_ours(target, owns) and _swap_keeping_the_lock(tmp, target):
            return  # the old outputs, now in tmp, go with it
        written = {p.relative_to(tmp) for p in tmp.rglob("*")}
        _merge_into(tmp, target)
        remove_stale(target, owns, written)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


STAGING = "{name}.*.tmp"
"""Names of the temporary files and staging folders of an output `name` (mkstemp's and
mkdtemp's, with the leading dot)."""
RENAME_EXCHANGE = 2
"""renameat2's flag swapping two paths in one step (Linux 3.15 and later)."""


def _remove_left_over(folder: Path, name: str, folders: bool) -> None:
    """Remove the temporary files (or, `folders`, staging folders) of output `name` in
    `folder`: called only while holding the folder's lock, when they are a killed
    writer's, so a kill needs no manual clean-up."""
    for path in folder.glob("." + STAGING.format(name=glob_escape(name))):
        try:
            if folders and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            elif not folders and path.is_file() and not path.is_symlink():
                path.unlink()
        except OSError:
            pass


def glob_escape(name: str) -> str:
    """`name` with glob's special characters matched literally."""
    import glob

    return glob.escape(name)


def _only_ours(target: Path, owns: Iterable[str]) -> bool:
    """Whether every file in `target` is an output of the verb (matches an `owns`
    pattern) or the writer's lock file: a folder of its own, which the new outputs may
    replace whole."""
    owns = tuple(owns)
    try:
        if not owns or target.stat().st_uid != os.geteuid():
            return False  # a swap would make the folder this user's
        here, real = Path.cwd().resolve(), target.resolve()
    except OSError:
        return False
    if here == real or real in here.parents:
        return False  # `--out .`: a swap would leave this process in the old, removed folder
    owned = {p for pattern in owns for p in target.glob(pattern)}
    folders = {target / d for pattern in owns for d in Path(pattern).parents if str(d) != "."}
    for path in target.rglob("*"):
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            return False
        if path.is_dir() and path not in folders:
            return False  # a folder of someone else's (an empty one too)
        if path.is_file() and path not in owned and path != target / LOCK_NAME:
            return False
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths `a` and `b` in one step (renameat2 RENAME_EXCHANGE); False where the
    C library or the file system cannot (the caller then merges file by file)."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    at_cwd = -100  # AT_FDCWD
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_keeping_the_lock(tmp: Path, target: Path) -> bool:
    """Put `tmp` in `target`'s place in one step, `target`'s lock file linked in first (its
    inode, so the flock on it, stays at the same path); `target`'s old outputs end up in
    `tmp`, which the caller removes. False where no such swap can be made."""
    lock = target / LOCK_NAME
    try:
        os.chmod(tmp, target.stat().st_mode & 0o7777)
        if lock.is_file():
            os.link(lock, tmp / LOCK_NAME)
    except OSError:
        return False
    if _exchange(tmp, target):
        return True
    (tmp / LOCK_NAME).unlink(missing_ok=True)
    return False


def _replace_keeping_the_lock(tmp: Path, target: Path) -> None:
    """Replace `target`, empty but for its lock file, by `tmp` in one rename: the lock file
    moves into `tmp` first (its inode, so the flock on it, goes along), leaving `target`
    empty, which rename may replace. Should another writer make `target` its own in
    between (it found no lock file there), the rename fails and so does this writer,
    leaving that writer's files alone."""
    from stragglerlab.util.errors import InputError

    os.rename(target / LOCK_NAME, tmp / LOCK_NAME)
    try:
        os.replace(tmp, target)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise InputError(f"another writer began writing {target} as this one finished; "
                         "nothing of this run was written there, so run it again") from None


def remove_stale(out: Path, owns: Iterable[str], written: set[Path]) -> list[Path]:
    """Remove the files of `out` matching an `owns` pattern but not in `written` (paths
    relative to `out`); returns them. Folders, and files matching no pattern, stay."""
    removed = []
    for pattern in owns:
        for path in sorted(out.glob(pattern)):
            if path.is_file() and not path.is_symlink() and path.relative_to(out) not in written:
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def _merge_into(src: Path, dst: Path) -> None:
    """Move every entry of src into dst (sub-folders merged, files replaced)."""
    for entry in src.iterdir():
        to = dst / entry.name
        if entry.is_dir() and to.is_dir():
            _merge_into(entry, to)
        else:
            os.replace(entry, to)
