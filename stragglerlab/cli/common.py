"""Flag checks and help shared by the verbs: `--out` folders, checked before any work
starts, the default `--out` of a `--run` verb, and the `examples:` epilog of --help.

    out = out_folder(args.out)      # InputError now, not a traceback after the work
    out = out_folder(run_out(args.out, args.run, "detect"))      # --out or RUN/detect
    inputs_not_overwritten([("--trace", trace)], out, OUTPUTS)   # never write over an input
    p = sub.add_parser(name, help=..., epilog=examples("stragglerlab detect --run R"))
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from stragglerlab.util.errors import InputError

MAX_PATH_CHARS = 4096
"""Longest --out accepted (Linux PATH_MAX)."""


def out_folder(path: str | None, flag: str = "--out", *, default_of: str | Path | None = None
               ) -> Path:
    """`path` as an output folder that exists or can be created and written.

    Refuses an empty name, an existing file, a path below a file, an over-long
    name and a folder that cannot be written, each with one message saying what
    to pass instead. `default_of`: the `--run` folder when `--out` was left out and
    `path` is its default inside that run; a run folder that cannot be written (a shared
    dataset mounted read-only) then gets a message saying to pass --out elsewhere.
    """
    if path is None or not str(path).strip():
        raise InputError(f"{flag} is empty: give the output folder, e.g. {flag} results/job1")
    text = str(path)
    if len(text) > MAX_PATH_CHARS or any(len(part) > 255 for part in Path(text).parts):
        raise InputError(f"{flag} {text[:80]!r}...: the name is too long; use a shorter path")
    if "\0" in text:
        raise InputError(f"{flag}: the path contains a NUL byte")
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise InputError(f"{flag} {out}: is a file, not a folder; {flag} names the output folder "
                         "(its file names are fixed), so give a folder path")
    probe = out
    while not probe.exists():  # the nearest existing ancestor must be a writable folder
        if probe.is_symlink():  # exists() follows links: this one leads nowhere
            raise InputError(f"{flag} {out}: {probe} is a symbolic link to "
                             f"{os.readlink(probe)!r}, which does not exist (or loops); "
                             "remove the link or make it point at a folder")
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"{flag} {out}: {probe} is a file, so no folder can be made below it")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _not_writable(out, probe, flag, default_of, _why_not_writable(probe))
    try:  # os.access says yes on /proc or /sys as root: only making something there tells
        os.rmdir(tempfile.mkdtemp(prefix=".stragglerlab-probe.", dir=probe))
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES):
            raise _not_writable(out, probe, flag, default_of, e.strerror) from None
        raise InputError(f"{flag} {out}: nothing can be written in {probe} ({e.strerror}; a "
                         "pseudo-filesystem such as /proc or /sys?); choose a folder on a "
                         "disk") from None
    return out


def _why_not_writable(folder: Path) -> str:
    """Why `folder` refuses writes, in words: a read-only file system or permissions."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    except OSError:
        pass
    return "no write permission"


def _not_writable(out: Path, probe: Path, flag: str, default_of: str | Path | None,
                  why: str) -> InputError:
    """The one message for an output folder that cannot be written."""
    if default_of is not None:
        return InputError(f"{flag} {out} (its default, inside --run {default_of}): {probe} "
                          f"is not writable ({why}); the run folder is only read, so pass "
                          f"{flag} DIR to write the results elsewhere")
    return InputError(f"{flag} {out}: {probe} is not writable ({why}); choose a folder you "
                      "can write")


RUN_RECORDS = ("trace.parquet", "meta.yaml", "faults.json", "run.json", "trace-parts",
               "whatif", "detect", "monitor", "ops.parquet", "import.json", "whatif.json",
               "scenario.yaml", "status", "gc", "cpu", "compute", "plot",
               "result-artifact.json", "driver.json")
"""Names a run folder holds (a testbed run's records, an import's or synth's outputs, the
artifact's result beside a differential-test trace)."""


def not_another_run(out: Path, writes: tuple[str, ...], wrote_it: Callable[[Path], bool],
                    verb: str, flag: str = "--out") -> Path:
    """`out` when a new trace may be written there: it holds no run record but the ones
    this verb writes, and those (if any) were written by this verb before.

    A new trace in another run's folder would leave that run's ground truth, what-if and
    findings beside a trace they do not describe; and a trace.parquet or meta.yaml this
    verb did not write may be the only copy of another job's. `wrote_it(out)` tells the
    verb's own earlier output (its writer record: import.json for `import`, the job name
    `synthetic` for `synth`), which a rerun may replace.
    """
    other = sorted(n for n in RUN_RECORDS if n not in writes and (out / n).exists())
    if other:
        raise InputError(f"{flag} {out}: already holds another run's {', '.join(other)}; a new "
                         "trace there would sit beside records of a different job, so pass an "
                         f"empty or new {flag} folder")
    mine = [n for n in writes if (out / n).exists()]
    if mine and not wrote_it(out):
        raise InputError(f"{flag} {out}: already holds {', '.join(mine)} that `stragglerlab "
                         f"{verb}` did not write (another job's); it would be overwritten, so "
                         f"pass an empty or new {flag} folder")
    return out


RUN_INPUTS = ("trace.parquet", "meta.yaml", "faults.json", "run.json", "scenario.yaml",
              "whatif/whatif.json", "status/*.json")
"""The records of a run folder that the verbs reading run folders read (a verb passes more,
e.g. score its detect/*.json)."""


def run_inputs(runs: Iterable[str | Path], names: Iterable[str] = RUN_INPUTS,
               label: str = "run folder") -> list[tuple[str, Path]]:
    """(what, path) of each existing file of each run folder matching a pattern of `names`
    (what: e.g. "run folder R:"): the inputs `inputs_not_overwritten` guards."""
    names = tuple(names)
    found = []
    for run in runs:
        folder = Path(run)
        if not folder.is_dir():
            continue  # the verb names a missing folder itself
        for pattern in names:
            found += [(f"{label} {folder}:", p) for p in sorted(folder.glob(pattern))]
    return found


def inputs_not_overwritten(inputs: Iterable[tuple[str, str | Path | None]], out: Path,
                           outputs: Iterable[str], flag: str = "--out") -> None:
    """Refuse, before any work, when a file the verb reads is one it would write into `out`.

    `inputs`: (what, path) pairs, e.g. ("--trace", "ow/whatif.json"); None paths are
    skipped. `outputs`: the verb's output names relative to `out`, glob patterns allowed
    (those a rerun removes as stale count too). Files are compared by device and inode
    (os.path.samefile), so a path spelled differently, a symbolic link or a hard link to an
    input is caught: writing the result there would destroy the input it was computed from.
    """
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    for what, path in inputs:
        if path is None:
            continue
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue  # a missing or unreadable input is the reader's error to give
        seen.setdefault((st.st_dev, st.st_ino), (what, str(path)))
    if not seen or not out.is_dir():
        return
    for pattern in outputs:
        targets = sorted(out.glob(pattern)) if any(c in pattern for c in "*?[") \
            else [out / pattern]
        for target in targets:
            try:
                st = os.stat(target)
            except (OSError, ValueError):
                continue  # nothing there yet: nothing to lose
            hit = seen.get((st.st_dev, st.st_ino))
            if hit:
                what, path = hit
                raise InputError(f"{flag} {out}: {target} is an output of this command and "
                                 f"also its input ({what} {path}); writing the result would "
                                 f"destroy that input, so pass another {flag} folder (or move "
                                 "the input out of it)")


def out_file(path: str | None, name: str, flag: str = "--out", *,
             default_of: str | Path | None = None) -> Path:
    """The fixed file `name` inside the output folder `path` (checked as `out_folder`),
    refused when something that is not a file already takes the name."""
    target = out_folder(path, flag, default_of=default_of) / name
    if target.exists() and not target.is_file():
        raise InputError(f"{flag} {path}: {target} exists and is not a file (a folder?), so "
                         f"{name} cannot be written there; remove it or choose another folder")
    return target


MAX_SNIFF_BYTES = 256 * 2**20
"""Largest existing output file whose `schema` a verb reads before replacing it."""


def not_another_record(target: Path, schemas: tuple[str, ...], what: str,
                       flag: str = "--out") -> Path:
    """`target`, unless a file there holds another kind of record (its JSON `schema` does
    not start with one of `schemas`). One name serves two records (whatif.json is both
    the what-if's result and the whatif detector's findings), so a wrong --out would
    replace the other silently. A file that is not such JSON is replaced as before."""
    import json

    try:
        if not target.is_file() or target.stat().st_size > MAX_SNIFF_BYTES:
            return target
        doc = json.loads(target.read_bytes())
    except (OSError, ValueError, RecursionError):
        return target
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if isinstance(schema, str) and not schema.startswith(schemas):
        raise InputError(f"{flag} {target.parent}: {target.name} there holds a {schema} "
                         f"record, not {what}; writing would replace it, so pass another "
                         f"{flag} folder (the default is the run folder's own)")
    return target


def run_out(out: str | None, run: str | None, verb: str) -> str | None:
    """`--out` as given (an empty one is refused later, by out_folder), else `RUN/<verb>`
    when `--run RUN` is (the CLI's convention)."""
    if out is not None:
        return out
    return str(Path(run) / verb) if run else out


def defaulted_run(out: str | None, run: str | None) -> str | None:
    """The `--run` folder whose default `--out` is used (`--out` left out), else None: what
    out_folder's `default_of` takes."""
    return run if out is None and run else None


def examples(*commands: str) -> str:
    """The `examples:` epilog of a verb's --help, one command line each."""
    return "examples:\n" + "\n".join(f"  {c}" for c in commands)


def verdict_words(straggling: bool | None, validity) -> str:
    """'straggling' / 'not straggling' / 'no verdict: ...' for a summary line."""
    if straggling is None:
        return f"no verdict: {', '.join(validity.reasons)}"
    said = "straggling" if straggling else "not straggling"
    return f"{said}, FORCED" if validity.forced else said


def finish_killed(runs, quiet: bool) -> None:
    """A run folder whose `train` driver was killed (driver.json left, no run.json) is
    finished first as a failed run with its finished steps (workloads.killed_run); a
    line on stderr says so."""
    from stragglerlab.workloads.killed_run import finish_killed_run

    for run in [runs] if isinstance(runs, (str, Path)) else runs:
        if run and str(run).strip() and Path(run).is_dir():
            note = finish_killed_run(run)
            if note and not quiet:
                print(note, file=sys.stderr)
