"""Flag checks and help shared by the verbs: `--out` folders, checked before any work
starts, the default `--out` of a `--run` verb, and the `examples:` epilog of --help.

    out = out_folder(args.out)      # InputError now, not a traceback after the work
    out = out_folder(run_out(args.out, args.run, "detect"))      # --out or RUN/detect
    p = sub.add_parser(name, help=..., epilog=examples("stragglerlab detect --run R"))
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from stragglerlab.errors import InputError

MAX_PATH_CHARS = 4096
"""Longest --out accepted (Linux PATH_MAX)."""


def out_folder(path: str | None, flag: str = "--out") -> Path:
    """`path` as an output folder that exists or can be created and written.

    Refuses an empty name, an existing file, a path below a file, an over-long
    name and a folder that cannot be written, each with one message saying what
    to pass instead.
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
        raise InputError(f"{flag} {out}: {probe} is not writable; choose a folder you can write")
    try:  # os.access says yes on /proc or /sys as root: only making something there tells
        os.rmdir(tempfile.mkdtemp(prefix=".stragglerlab-probe.", dir=probe))
    except OSError as e:
        raise InputError(f"{flag} {out}: nothing can be written in {probe} ({e.strerror}; a "
                         "pseudo-filesystem such as /proc or /sys?); choose a folder on a "
                         "disk") from None
    return out


RUN_RECORDS = ("trace.parquet", "meta.yaml", "faults.json", "run.json", "trace-parts",
               "whatif", "detect", "monitor", "ops.parquet", "import.json", "whatif.json")
"""Names a run folder holds (a testbed run's records, an import's or synth's outputs)."""


def not_another_run(out: Path, writes: tuple[str, ...], flag: str = "--out") -> Path:
    """`out` when it holds no run record beside the ones this verb writes: writing a new
    trace into another run's folder would leave that run's ground truth, what-if and
    findings beside a trace they do not describe."""
    other = sorted(n for n in RUN_RECORDS if n not in writes and (out / n).exists())
    if other:
        raise InputError(f"{flag} {out}: already holds another run's {', '.join(other)}; a new "
                         "trace there would sit beside records of a different job, so give a "
                         "new folder")
    return out


def out_file(path: str | None, name: str, flag: str = "--out") -> Path:
    """The fixed file `name` inside the output folder `path` (checked as `out_folder`),
    refused when something that is not a file already takes the name."""
    target = out_folder(path, flag) / name
    if target.exists() and not target.is_file():
        raise InputError(f"{flag} {path}: {target} exists and is not a file (a folder?), so "
                         f"{name} cannot be written there; remove it or choose another folder")
    return target


def run_out(out: str | None, run: str | None, verb: str) -> str | None:
    """`--out` as given (an empty one is refused later, by out_folder), else `RUN/<verb>`
    when `--run RUN` is (the CLI's convention)."""
    if out is not None:
        return out
    return str(Path(run) / verb) if run else out


def examples(*commands: str) -> str:
    """The `examples:` epilog of a verb's --help, one command line each."""
    return "examples:\n" + "\n".join(f"  {c}" for c in commands)
