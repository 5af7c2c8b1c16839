"""The one command line: `stragglerlab <verb>`, one module per verb in this package.

Every verb follows one convention:

* `--run DIR` names one run folder and `--runs DIR...` several. `--out DIR` is
  always a folder whose file names are fixed (each verb's help says which); with
  `--run` it defaults to `DIR/<verb>` (`whatif --run R` writes R/whatif/,
  `detect --run R` R/detect/); verbs that read several runs or write a run
  folder (`train`, `synth`, `import`) require it.
* A verb owns its fixed output names: a rerun removes those of an earlier run
  that it did not write again (`whatif` without `--timelines` drops the old
  timelines); other files in `--out` are never touched.
* The result summary goes to stdout, progress to stderr (cli/progress.py: a
  `rich` bar with ETA on a terminal, occasional plain lines in a log).
  `--quiet` silences progress only; the result still prints.
* Every JSON a verb writes carries `"schema": "stragglerlab.<thing>/<version>"`
  (readers still accept older files without it).
* `--help` shows every default and at least one example.
* Bad input prints one clear message (`stragglerlab VERB: error: ...`) on
  stderr and exits 2.
* A writing verb holds the lock of the folder it writes (stragglerlab/util/folder_lock.py,
  the monitor's too) from the check of its --out to its end: a second writer of the
  same folder is refused at once, exit 2, naming the first's verb and pid (it does not
  wait: a what-if that waited would then replace the one just written).

    stragglerlab --version
    stragglerlab list scenarios
    stragglerlab whatif --trace trace.parquet --meta meta.yaml --out results/job1

Verb modules are imported lazily: a command imports only the module of the verb it
names (`stragglerlab whatif` never imports torch, Ray or matplotlib), and `--help`
imports none of the analysis.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys

from stragglerlab.util.errors import InputError
from stragglerlab.util.interrupts import install_sigterm_handler, interrupt_message

EXIT_BAD_INPUT = 2

VERBS: dict[str, str] = {
    "train": "stragglerlab.cli.train",
    "whatif": "stragglerlab.cli.whatif",
    "detect": "stragglerlab.cli.detect",
    "score": "stragglerlab.cli.score",
    "figures": "stragglerlab.cli.figures",
    "plot": "stragglerlab.cli.plot",
    "report": "stragglerlab.cli.report",
    "synth": "stragglerlab.cli.synth",
    "list": "stragglerlab.cli.listing",
    "import": "stragglerlab.cli.import_kineto",
    "clean": "stragglerlab.cli.clean",
    "noise-floor": "stragglerlab.cli.noise_floor",
    "monitor": "stragglerlab.cli.monitor",
}
"""Verb name -> module with `add_parser(sub, name) -> ArgumentParser` and `run(args) -> int`."""


def version() -> str:
    """The installed distribution's version (the source tree's when not installed)."""
    from stragglerlab.util.package_version import package_version

    return package_version()


def _verb(name: str):
    return importlib.import_module(VERBS[name])


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every verb's --help: each flag's default shown, description and epilog kept as written.

    A default of None, False or [] (a flag that is off, a list that is empty) is not
    shown; the help text says what leaving the flag out means instead."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if default is None or default is False or (isinstance(default, list) and not default):
            return action.help
        if isinstance(default, list) and action.help and "%(default)" not in action.help:
            shown = " ".join(map(str, default)).replace("%", "%%")
            return f"{action.help} (default: {shown})"  # `all`, not ['all']
        return super()._get_help_string(action)


GIVEN_FLAGS = "_stragglerlab_given_flags"
"""Attribute of the namespace being filled that holds the `store` actions given so far:
the given-twice check's state lives in the one parse it belongs to (never on the parser
or an action, which a program may use for any number of parses), and the parser removes
it before handing the namespace back."""


class _StoreOnce(argparse.Action):
    """argparse's `store`, refusing a flag given twice: `--out a ... --out b` would keep
    `b` silently, and a second value is a typo or a pasted command more often than intent.
    Repeatable flags say so with `action="append"`."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string is not None:
            given = namespace.__dict__.setdefault(GIVEN_FLAGS, set())
            if self in given:
                parser.error(f"{'/'.join(self.option_strings)} is given twice (the second is "
                             f"{values!r}); give it once")
            given.add(self)
        setattr(namespace, self.dest, values)


class ArgumentParser(argparse.ArgumentParser):
    """Every verb's parser (and its own sub-verbs'): `store` flags given once."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, without the given-twice check's record in the namespace returned
        (a sub-verb's namespace is copied into its caller's, so each level removes it)."""
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.__dict__.pop(GIVEN_FLAGS, None)
        return namespace, extras


def docstring_examples(doc: str | None) -> str:
    """An `examples:` epilog from the indented `stragglerlab ...` lines of a verb module's
    docstring (the fallback for a verb whose add_parser gives no epilog)."""
    lines, keep = [], False
    for line in (doc or "").splitlines():
        text = line.strip()
        if line.startswith("    ") and (text.startswith("stragglerlab ") or keep):
            lines.append("  " + text)
            keep = text.endswith("\\")
        else:
            keep = False
    return "examples:\n" + "\n".join(lines) if lines else ""


class _Version(argparse.Action):
    """argparse's `version` action, reading the version only when asked (the installed
    distribution's metadata costs about 30 ms, which every command would pay)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit") -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser._print_message(f"stragglerlab {version()}\n", sys.stdout)
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per verb, each with `--quiet`, the
    defaults-showing HelpFormatter and an `examples:` epilog. `only`: that verb's
    sub-parser alone (it parses that verb's command lines as the whole parser does,
    without importing the other verbs' modules)."""
    parser = ArgumentParser(
        prog="stragglerlab",
        description="Straggler testbed and what-if analysis (OSDI'25 method).",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True,
                                parser_class=ArgumentParser)
    for name in VERBS if only is None else (only,):
        module = _verb(name)
        p = module.add_parser(sub, name)
        p.add_argument("--quiet", action="store_true",
                       help="no progress output; the result still prints")
        p.formatter_class = HelpFormatter
        if not p.epilog:
            p.epilog = docstring_examples(module.__doc__)
    return parser


def _reader_left(stream) -> bool:
    """Whether `stream` is a pipe whose reader has closed it. Asked of the descriptor
    (poll reports an error on a pipe's write end with no reader): a flush that succeeds
    says nothing, for the failed write may already have emptied the buffer."""
    import select

    try:
        fd = stream.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return True  # closed, detached or not a file: nothing reads it


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `stragglerlab` console script."""
    _escape_unencodable_output()
    try:
        given = sys.argv[1:] if argv is None else argv
        # Only the verb named is imported: all of them take about half a second.
        only = given[0] if given and given[0] in VERBS else None
        args = build_parser(only).parse_args(argv)
    except KeyboardInterrupt:
        print("stragglerlab: interrupted", file=sys.stderr)
        return 130
    # `kill PID` (a scheduler, a timeout) must clean up like Ctrl-C; a run started in the
    # background of a non-interactive shell also ignores SIGINT, leaving SIGTERM as its stop.
    install_sigterm_handler()
    from stragglerlab.util.folder_lock import release_at_end

    try:
        with release_at_end():  # the folder lock a writing verb takes ends with its run
            return _verb(args.verb).run(args) or 0
    except InputError as e:
        try:
            print(f"stragglerlab {args.verb}: error: {e}", file=sys.stderr)
        except (BrokenPipeError, ValueError):
            pass  # stderr closed: the exit status still says it
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        if interrupt_message(e) == "SIGTERM":
            print(f"stragglerlab {args.verb}: terminated (SIGTERM)", file=sys.stderr)
            return 143
        print(f"stragglerlab {args.verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `stragglerlab ... | head`: the reader left; not an error of ours
        import os

        if _reader_left(sys.stdout):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        # stdout is fine, so stderr broke, mid-way through the work: it did not finish.
        return 1
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            # A folder that turned read-only (or lost its permissions) after the checks.
            where = f"{e.filename}: " if e.filename else ""
            try:
                print(f"stragglerlab {args.verb}: error: {where}{e.strerror}; a read-only "
                      "input is fine, but --out must name a folder you can write",
                      file=sys.stderr)
            except OSError:
                pass
            return EXIT_BAD_INPUT
        if e.errno not in DISK_ERRNOS:
            raise
        return _disk_failed(args.verb, e)
    except Exception as e:
        disk = disk_error(e)
        if disk is None:
            raise
        # A library failing in its own way once the disk was full (matplotlib's PDF
        # writer raises AttributeError from its clean-up): the full disk is the cause.
        return _disk_failed(args.verb, disk)


DISK_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT)
"""A full disk, a dead device, a quota reached."""


def disk_error(e: BaseException) -> OSError | None:
    """The full-disk OSError that `e` was raised from or while handling, if any."""
    seen = 0
    while e is not None and seen < 32:  # a bounded walk: chains can loop
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _disk_failed(verb: str, e: OSError) -> int:
    """One error line for a write that a full disk (or a dead device) refused, naming the
    file or the folder being written and the room left there; exit 2. Under stdout
    (`> file`) or a file of ours alike."""
    import os
    import shutil

    from stragglerlab.util.folder_lock import taken

    try:  # what stdout still buffers would fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a file (a caller's StringIO): nothing to fail at exit
    folders = taken()
    where = e.filename or (folders[-1] if folders else None)
    room = ""
    if where is not None:
        try:
            probe = where if os.path.isdir(where) else os.path.dirname(where) or "."
            free = shutil.disk_usage(probe).free
            room = f"; {_size(free)} free there, less than the output needs"
        except OSError:
            pass
    target = f" to {where}" if where else ""
    try:
        print(f"stragglerlab {verb}: error: a write{target} failed ({e.strerror}){room}: free "
              "space or write the output elsewhere", file=sys.stderr)
    except OSError:
        pass
    return EXIT_BAD_INPUT


def _size(n: int) -> str:
    """`n` bytes in the largest unit that keeps a number >= 1 (KiB, MiB, ...)."""
    value, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def _escape_unencodable_output() -> None:
    """Under an ASCII locale (LC_ALL=C, PYTHONIOENCODING=ascii) a path like `runs/☃`
    cannot be printed; show it escaped (\\u2603) rather than fail on it."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a detached or closed stream: leave it
                pass


if __name__ == "__main__":
    sys.exit(main())
