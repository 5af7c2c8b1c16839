"""Bounded, validated reading of the small JSON/YAML files of a run folder.

Every reader of the run-folder contract (run.json, faults.json, findings,
whatif.json, meta.yaml) goes through here, so any bad file (missing, too big,
not UTF-8, not JSON/YAML, wrong shape or type, non-finite number) becomes ONE
`InputError` whose message names the file, the field and the fix, never a
traceback. Values echoed in messages are truncated.

    raw = load_json(path, what="run record", fix="rerun `stragglerlab train`")
    chk = Checker(path, fix="rerun `stragglerlab train`")
    steps = chk.integer(raw.get("first_step"), "faults[0].first_step", minimum=0)
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import NoReturn

import yaml

from stragglerlab.util.errors import InputError

MAX_JSON_BYTES = 64 * 1024 * 1024
"""Largest JSON file a run-folder reader opens (a findings or whatif.json is far smaller)."""
MAX_YAML_BYTES = 4 * 1024 * 1024
"""Largest YAML file (meta.yaml, scenario.yaml) a run-folder reader opens."""
ECHO_CHARS = 60
"""Longest echo of a bad value in a message."""


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """repr(value), cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def number_hint(value: object, json_file: bool = False) -> str:
    """Why a number came back as text, when it did: PyYAML follows YAML 1.1, where `1e-3`
    and `1.0e300` (no dot, or an unsigned exponent) are strings; in a JSON file, a number
    in quotes; '' otherwise."""
    if not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if json_file:
        return " (a number in quotes: write it without them)" if math.isfinite(number) else ""
    return (" (YAML 1.1 reads it as text: write the number with a dot and a signed "
            "exponent, e.g. 1.0e-3 or 1.0e+3, or as a plain decimal)")


NOT_REGULAR = "is not a regular file (a pipe or a device?)"
"""What a message says of a path that is a FIFO, socket or device (trace_io says the same)."""


def entry_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a file, from its stat alone (opening a FIFO would block
    until a writer comes): 'is a folder', NOT_REGULAR, or a symlink that does not resolve.
    None for a regular file (or a link to one) and for a path that does not exist."""
    try:
        mode = path.stat().st_mode
    except OSError:  # a link to nothing or a loop (ELOOP); else open() says why
        return ("is a symlink that does not resolve (its target is missing, or it loops)"
                if path.is_symlink() else None)
    if stat.S_ISDIR(mode):
        return "is a folder"
    return None if stat.S_ISREG(mode) else NOT_REGULAR


def read_text(path: str | Path, what: str, fix: str, max_bytes: int,
              regular_only: bool = False) -> str:
    """The file's text; InputError when missing, unreadable, too large or not UTF-8.

    At most max_bytes + 1 bytes are ever read, so `/dev/zero`, a FIFO or a file
    that grows while read cannot make this read forever or fill the memory.
    With `regular_only` (a run folder's own files, which our writers make regular
    files), a pipe or a device is refused from its stat alone, never opened.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} is a folder, not a file; {fix}", str(p))
    if regular_only and p.exists() and not p.is_file():
        raise InputError(f"{what} {NOT_REGULAR}; {fix}", str(p))
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(f"{what} is {size:,} bytes, over the {max_bytes:,}-byte limit; "
                             f"{fix}", str(p))
        # Opened non-blocking: a named pipe no one writes to would block open() forever
        # (it reads as empty instead). Blocking again to read: a pipe with a writer
        # (`<(cat x)`) delivers all of it.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)
        with open(fd, "rb") as f:
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"no {what} here; {fix}", str(p)) from None
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror}; {fix}", str(p)) from None
    if len(raw) > max_bytes:
        raise InputError(f"{what} holds more than the {max_bytes:,}-byte limit (a device or a "
                         f"growing file?); {fix}", str(p))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{what} is not UTF-8 text (bad byte at offset {e.start}); {fix}",
                         str(p)) from None


class DuplicateKey(ValueError):
    """A key given twice in one JSON object or YAML mapping."""

    def __init__(self, key: object) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """json object_pairs_hook: the object, or DuplicateKey (a hand edit that added a key
    again would otherwise lose the first value without a word)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def load_json(path: str | Path, what: str, fix: str, max_bytes: int | None = None,
              regular_only: bool = False) -> object:
    """Parse a JSON file (NaN/Infinity literals are kept; typed fields reject them later).
    `regular_only`: refuse a pipe or a device unopened (see read_text)."""
    text = read_text(path, what, fix, MAX_JSON_BYTES if max_bytes is None else max_bytes,
                     regular_only)
    if not text and Path(path).exists() and not Path(path).is_file():
        # "not valid JSON" would blame the content of what is no file at all
        raise InputError(f"{what} {NOT_REGULAR} and nothing came from it; {fix}", str(path))
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except DuplicateKey as e:
        raise InputError(f"{what} holds the key {echo(e.key)} twice in one object (JSON "
                         f"keeps only the last); {fix}", str(path)) from None
    except json.JSONDecodeError as e:
        raise InputError(f"{what} is not valid JSON ({e.msg}, line {e.lineno} column {e.colno});"
                         f" {fix}", str(path)) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be JSON we wrote; {fix}",
                         str(path)) from None
    except ValueError as e:  # an integer past Python's 4,300-digit conversion limit
        raise InputError(f"{what} holds a value JSON we wrote never does ({one_line(str(e))});"
                         f" {fix}", str(path)) from None


MAX_YAML_NODES = 100_000
"""Most YAML nodes (scalars, lists, mappings) one file may hold."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of lists/mappings in a YAML file."""


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases (no `*x` bombs), too many nodes and deep nesting.

    Our YAML files (job meta, scenario configs) never need anchors; refusing
    aliases means no document can expand past its own size, in memory or in an
    error message that echoes a value.
    """

    def compose_node(self, parent, index):  # noqa: D102 - yaml.composer hook
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"aliases (*name) are not accepted, line {mark.line + 1}")
        self._nodes = getattr(self, "_nodes", 0) + 1
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._nodes > MAX_YAML_NODES:
                raise yaml.YAMLError(f"more than {MAX_YAML_NODES:,} YAML nodes")
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: D102 - yaml.constructor hook
        keys = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in keys
            except TypeError:  # an unhashable key: the base class says so itself
                break
            if duplicate:
                mark = key_node.start_mark
                raise yaml.YAMLError(f"the key {echo(key)} is given twice in one mapping, "
                                     f"line {mark.line + 1} (YAML keeps only the last)")
            keys.add(key)
        return super().construct_mapping(node, deep=deep)


_SAFE_INT = yaml.SafeLoader.construct_yaml_int


def _construct_int(loader: BoundedLoader, node) -> int:
    """An int scalar, refusing the two YAML 1.1 spellings no reader expects: a leading 0
    (`010` is octal 8, `012` is 10) and base 60 (`1:30` is 90)."""
    text = str(node.value).replace("_", "")
    digits = text.lstrip("+-")
    sexagesimal = ":" in text
    if sexagesimal or (len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbB"):
        value = _SAFE_INT(loader, node)
        how = "base 60: quote it" if sexagesimal else "octal: drop the leading 0"
        raise yaml.YAMLError(f"{echo(node.value)} on line {node.start_mark.line + 1} reads "
                             f"as {value} in YAML 1.1 ({how})")
    return _SAFE_INT(loader, node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def parse_yaml(text: str, where: str, what: str, fix: str) -> object:
    """Parse YAML text with BoundedLoader; one one-line InputError on any problem."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where_in = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or (str(e) if type(e) is yaml.YAMLError else "")
        detail = f" ({one_line(problem)})" if problem else ""
        raise InputError(f"{what} is not valid YAML{where_in}{detail}; {fix}", where) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply; {fix}", where) from None
    except ValueError as e:  # an integer past Python's 4,300-digit conversion limit
        raise InputError(f"{what} holds a value no config needs ({one_line(str(e))}); {fix}",
                         where) from None


def one_line(text: str, limit: int = 120) -> str:
    """text on one line, cut to limit characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def load_yaml(path: str | Path, what: str, fix: str, max_bytes: int | None = None,
              empty_ok: bool = False, regular_only: bool = False) -> object:
    """Parse a YAML file with the bounded safe loader (no aliases, capped nodes and depth).
    An empty document is an InputError unless `empty_ok` (then None); `regular_only`:
    refuse a pipe or a device unopened (see read_text)."""
    text = read_text(path, what, fix, MAX_YAML_BYTES if max_bytes is None else max_bytes,
                     regular_only)
    doc = parse_yaml(text, str(path), what, fix)
    if doc is None and not empty_ok:  # "got None" further on would say nothing of why
        kind = "" if Path(path).is_file() else " (not a regular file: a pipe or a device?)"
        raise InputError(f"{what} is empty: no YAML document in it (an empty file, only "
                         f"comments or `null`){kind}; {fix}", str(path))
    return doc


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Checker:
    """Field checks of one file: every failure is one InputError naming file, field and fix."""

    def __init__(self, path: str | Path, fix: str) -> None:
        self.path = str(path)
        self.fix = fix

    def fail(self, field: str, problem: str) -> NoReturn:
        """Raise the one error of this file."""
        raise InputError(f"{field}: {problem}; {self.fix}", self.path)

    def mapping(self, value: object, field: str) -> dict:
        """A JSON object / YAML mapping."""
        if not isinstance(value, dict):
            self.fail(field, f"expected an object, got {echo(value)}")
        return value

    def listing(self, value: object, field: str) -> list:
        """A JSON list."""
        if not isinstance(value, list):
            self.fail(field, f"expected a list, got {echo(value)}")
        return value

    def string(self, value: object, field: str, optional: bool = False) -> str | None:
        """A string (None allowed when optional)."""
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self.fail(field, f"expected a string, got {echo(value)}")
        return value

    def schema(self, value: object, current: str, what: str) -> str:
        """`value` as the file's `schema`: `current` (`<family>/<version>`, the one version
        this tool writes and reads), else InputError: another family is another kind of
        file, another version a newer tool's file (or an edited one), whose fields may
        mean other things."""
        schema = self.string(value, "schema")
        if not schema.startswith(current.rsplit("/", 1)[0] + "/"):
            self.fail("schema", f"{echo(schema)} is not a {what} schema ({current})")
        if schema != current:
            self.fail("schema", f"{echo(schema)} is a version this stragglerlab does not "
                      f"read (it reads {current}): a newer stragglerlab wrote it, or it was "
                      "edited")
        return schema

    def boolean(self, value: object, field: str) -> bool:
        """true or false."""
        if not isinstance(value, bool):
            self.fail(field, f"expected true or false, got {echo(value)}")
        return value

    def integer(self, value: object, field: str, minimum: int | None = None,
                maximum: int | None = None, optional: bool = False) -> int | None:
        """An integer in [minimum, maximum] (None allowed when optional)."""
        if value is None and optional:
            return None
        if not _is_int(value):
            self.fail(field, f"expected an integer, got {echo(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            lo = "" if minimum is None else f">= {minimum}"
            hi = "" if maximum is None else f"<= {maximum}"
            bounds = " and ".join(b for b in (lo, hi) if b)
            self.fail(field, f"{value} is out of range (must be {bounds})")
        return value

    def number(self, value: object, field: str, minimum: float | None = None,
               maximum: float | None = None, optional: bool = False) -> float | None:
        """A finite number in [minimum, maximum] (None allowed when optional)."""
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = number_hint(value, json_file=self.path.lower().endswith((".json", ".jsonl")))
            self.fail(field, f"expected a number, got {echo(value)}{hint}")
        if not math.isfinite(value):
            self.fail(field, f"{value} is not a finite number")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            self.fail(field, f"{value} is out of range [{minimum}, {maximum}]")
        return float(value)

    def finite_tree(self, value: object, field: str) -> None:
        """Every number nested in value is finite (strings, None, bools pass)."""
        stack = [(value, field)]
        while stack:
            v, f = stack.pop()
            if isinstance(v, float) and not math.isfinite(v):
                self.fail(f, f"{v} is not a finite number (write null for unknown)")
            elif isinstance(v, dict):
                stack.extend((x, f"{f}.{k}") for k, x in v.items())
            elif isinstance(v, list):
                stack.extend((x, f"{f}[{i}]") for i, x in enumerate(v))


def finite_or_none(value: object) -> object:
    """value with every non-finite float nested in it replaced by None (for writers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def distinct_runs(runs: list[str], flag: str = "--runs") -> list[str]:
    """`runs` when no folder is listed twice (compared by device and inode, else by the
    resolved path: `base`, `./base/` and a symbolic link to it are one folder).

    An error, not a silent de-duplication: the CLI gets the list after the shell expanded
    any glob, so a folder twice is a typo or two overlapping globs, and score, report and
    noise-floor would count it twice (bootstrap over copies); telling beats guessing.
    """
    first: dict[object, str] = {}
    for run in runs:
        try:
            st = os.stat(run)
            key: object = (st.st_dev, st.st_ino)
        except (OSError, ValueError):
            key = os.path.abspath(run)  # a missing folder: the verb names it itself
        if key in first:
            where = Path(run).resolve() if Path(run).exists() else Path(os.path.abspath(run))
            raise InputError(f"{flag}: run folder {where} is given twice (as {first[key]!r} "
                             f"and {run!r}); list each once")
        first[key] = run
    return runs
