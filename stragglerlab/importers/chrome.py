"""Find Chrome-trace JSON files (torch.profiler / Kineto output), gzipped or not, and say
what is wrong with one.

    files = find_traces("run/kineto")          # a folder's *.json, *.json.gz, or a glob
    files = find_traces(["r0.json", "r1.json"])  # or several files, folders, globs
    problem = bytes_problem(head, name)        # empty, a zip, ...: what it is instead

and the checks of a trace's pieces both import paths share (events, step ranges, ranks);
stragglerlab.importers.stream_json reads the files, with bounded memory.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Sequence
from pathlib import Path

from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import entry_problem

PATTERNS = ("*.json", "*.json.gz")
STEP_RE = re.compile(r"ProfilerStep#(\d{1,18})$")
"""A profiler step range's name (`.match`); its number fits an int64 (no 5000-digit int())."""


MAX_SUBFOLDER_DEPTH = 3
"""How many folder levels below --traces trace files are looked for."""


def find_traces(spec: str | Sequence[str]) -> list[Path]:
    """Trace files from a folder (its *.json, *.json.gz; where it holds none, those in its
    subfolders) or a glob pattern; or from several of those and of trace files (the shell
    expands `--traces run/rank*.json` into one argument per file), pooled."""
    if not isinstance(spec, str):
        specs = list(spec)
        if len(specs) == 1:
            return find_traces(specs[0])
        if not specs:
            return find_traces("")
        files: set[Path] = set()
        for one in specs:
            p = Path(one)
            if p.is_file() or (p.exists() and not p.is_dir()):
                if not p.name.endswith(TRACE_SUFFIXES):
                    raise InputError(f"--traces {one}: not named like a trace file (*.json or "
                                     "*.json.gz); pass the rank traces, their folder or a "
                                     "glob", one)
                check_entry(p)
                files.add(p)
            else:
                files.update(find_traces(one))
        return sorted(files)
    if not spec.strip():
        raise InputError("--traces is empty: pass the folder holding one torch.profiler trace "
                         "per rank (*.json or *.json.gz) or a glob")
    p = Path(spec)
    if p.is_dir():
        files = _regular({f for pat in PATTERNS for f in p.glob(pat)})
        # One subfolder per rank or per run (tensorboard_trace_handler's logs), a few levels
        # down at most: `--traces /` must not walk the whole filesystem.
        for depth in range(1, MAX_SUBFOLDER_DEPTH + 1):
            if files:
                break
            files = _regular({f for pat in PATTERNS for f in p.glob("*/" * depth + pat)})
        where = f"folder {spec} (or its subfolders, {MAX_SUBFOLDER_DEPTH} levels down)"
    else:
        # A pattern may match other things too (`run/rank*` a log folder): only entries
        # named like a trace must be trace files.
        found = {Path(f) for f in glob.glob(spec)}
        _regular({f for f in found if f.name.endswith(TRACE_SUFFIXES)})
        files = sorted(f for f in found if f.is_file())
        where = f"pattern {spec!r}"
    if not files:
        raise InputError(f"--traces: no trace files in {where}; pass the folder holding one "
                         "torch.profiler trace per rank (*.json or *.json.gz) or a glob")
    return files


TRACE_SUFFIXES = (".json", ".json.gz")
"""Names PATTERNS match: an entry named so must be a regular file (entry_problem)."""


def check_entry(path: Path) -> None:
    """InputError naming `path` when entry_problem finds one."""
    if problem := entry_problem(path):
        raise InputError(f"{problem}, named like a trace file: remove it or point --traces "
                         "at the trace files", str(path))


def _regular(entries: set[Path]) -> list[Path]:
    """The entries, sorted, after checking each is a regular file (one InputError for the
    first that is not: dropping it would leave only a vague 'missing ranks')."""
    files = sorted(entries)
    for f in files:
        check_entry(f)
    return files


GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of gzip data."""
TWICE = ("the gzip data inflates to gzip data again: the file is compressed twice; "
         "decompress it once (gunzip) or pass the profiler's export unedited")
"""The message of a trace gzipped twice."""
OTHER_FORMATS = (
    (b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "an empty zip archive"),
    (b"BZh", "bzip2 data"), (b"\xfd7zXZ\x00", "xz data"), (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive"), (b"PAR1", "a parquet file"),
    (b"\x89HDF", "an HDF5 file"), (b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF"))
"""(magic, what it is) of formats a trace file turns out to be instead of gzip or JSON."""
FIX = "copy the file again or re-export it with prof.export_chrome_trace"
TRACE_OBJECT = ("not a Chrome trace object ({\"traceEvents\": [...]}, what torch.profiler's "
                "export_chrome_trace writes); pass the profiler's own files")


def bytes_problem(head: bytes, name: str) -> str | None:
    """What a trace file starting with `head` (its first bytes) is, when it can be neither
    gzip nor JSON: empty, another format named by its magic, or binary under a .gz name
    (None: gzip, or text that may be JSON: the parser says the rest)."""
    if not head:
        return f"the file is empty (0 bytes); {FIX}"
    if head[:2] == GZIP_MAGIC:
        return None
    expected = "gzip" if name.endswith(".gz") else "JSON"
    for magic, kind in OTHER_FORMATS:
        if head.startswith(magic):
            return (f"not {expected}: {kind} (starts with {magic!r}); pass the profiler's "
                    ".json or .json.gz itself (unpack an archive first)")
    if expected == "gzip" and head.lstrip()[:1] not in (b"{", b"["):
        return (f"not gzip (starts with {head[:8]!r}, not gzip's {GZIP_MAGIC!r}) nor JSON; "
                f"{FIX}")
    return None


def shape_problem(doc: object) -> str | None:
    """Why a parsed JSON document is not a Chrome trace object (None: it is an object)."""
    if isinstance(doc, dict):
        return None
    if doc is None or isinstance(doc, bool):
        kind = f"a JSON {json.dumps(doc)}"
    elif isinstance(doc, (int, float)):
        kind = f"a JSON number ({str(doc)[:20]})"
    else:
        kind = f"a JSON {'list' if isinstance(doc, list) else 'string'}"
    return f"{kind}, {TRACE_OBJECT}"


MAX_TIME_US = 2.0 ** 62
"""Largest |ts| or dur accepted, microseconds (~146,000 years): past it a number is no time."""


def event_problem(e: dict) -> str | None:
    """What makes one complete ('X') event unusable, None when its ts, dur and args are
    well-formed: finite real times within MAX_TIME_US, dur >= 0, args an object."""
    for key in ("ts", "dur"):  # a complete event has both (Trace Event Format); a dur
        v = e.get(key)            # defaulted to 0 would make an op free
        if v is None:
            return f"{key} is missing (a complete 'X' event has ts and dur, microseconds)"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{key} is {type(v).__name__} {str(v)[:40]!r}, not a number (microseconds)"
        if not abs(v) < MAX_TIME_US:  # also NaN and ints too large for a float
            return f"{key} {str(v)[:40]} is not a finite time within {MAX_TIME_US:.3g} us"
    if e["dur"] < 0:
        return f"dur {e['dur']} is negative"
    if e.get("args") is not None and not isinstance(e["args"], dict):
        return f"args is {type(e['args']).__name__}, not an object"
    for key in ("cat", "tid", "pid"):  # labels: a string or a number, never a container
        if isinstance(e.get(key), (list, dict)):
            return f"{key} is {type(e[key]).__name__}, not a string or a number"
    return None


STEP_OVERLAP_US = 1000.0
"""How far (us) a ProfilerStep range may reach into the next one: the profiler closes one
and opens the next back to back, a clock read apart."""


def step_number(name: str, where: str) -> int:
    """N of a range named `ProfilerStep#...`; InputError when N is not a step number torch
    writes (`ProfilerStep#two`, `#-1`, `#3 `): such a step would be dropped unsaid."""
    m = STEP_RE.match(name)
    if m is None:
        raise InputError(f"a range is named {name[:60]!r}: torch names each step "
                         "ProfilerStep#<n>, n a number from 0; pass the profiler's export "
                         "unedited, or fix that range's name", where)
    return int(m.group(1))


def add_step(steps: dict[int, tuple[float, float]], n: int, start: float, end: float,
             where: str) -> None:
    """Record ProfilerStep#n's CPU range (us); InputError when the rank already has a
    different #n (an exact copy, a trace concatenated with itself, is the same step). Kept
    as the last before, a renumbered or merged file silently lost a step."""
    if n in steps and steps[n] != (start, end):
        raise InputError(f"ProfilerStep#{n} appears twice on this rank (at {steps[n][0]:,.0f} "
                         f"and {start:,.0f} us): a rank numbers each step once; pass the "
                         "profiler's export unedited (one file per rank, not merged)", where)
    steps[n] = (start, end)


def check_step_order(steps: dict[int, tuple[float, float]], where: str) -> None:
    """InputError when a rank's ProfilerStep#N ranges (step -> (start, end), us) are not in
    step order one after another: steps that overlap or run backwards in time come from an
    edited or merged file, and a simulation over them would give a meaningless S."""
    order = sorted(steps)
    for a, b in zip(order, order[1:], strict=False):
        if steps[b][0] < steps[a][1] - STEP_OVERLAP_US:
            raise InputError(f"ProfilerStep#{b} starts {(steps[a][1] - steps[b][0]) / 1e3:,.3f} "
                             f"ms before ProfilerStep#{a} ends: a rank's steps must follow one "
                             "another in time; pass the profiler's export unedited (one file "
                             "per rank, not merged)", where)


def one_trace_per_rank(ranked: list[tuple[int, str]]) -> dict[int, str]:
    """rank -> file of per-rank traces given as (rank, file); one InputError when a rank
    has two files, or when there are none (the library called on an empty list)."""
    if not ranked:
        raise InputError("no rank traces to import: pass every rank's file of the job (a "
                         "folder, a glob or a list of paths)", "traces")
    seen: dict[int, str] = {}
    for rank, path in ranked:
        if rank in seen:
            raise InputError(f"rank {rank} appears twice (also in {seen[rank]}); pass one "
                             "trace per rank", path)
        seen[rank] = path
    return seen


EMPTY_PROFILE = ("the file holds no trace events (traceEvents is empty): an empty profile; "
                 "profile at least one full step with torch.profiler's schedule (e.g. "
                 "schedule(wait=1, warmup=1, active=2)) and call prof.step() once per step")
"""The message for a trace whose traceEvents list is empty."""


def dinfo_problem(info: object) -> str | None:
    """What is wrong with distributedInfo's rank or world_size where the trace has the key
    but not an integer (None: fine, or absent: the caller says what absence means)."""
    if not isinstance(info, dict):
        return None
    for key in ("rank", "world_size"):
        v = info.get(key)
        if key in info and type(v) is not int:  # bool too: True is no rank
            return (f"distributedInfo.{key} must be an integer, but it is "
                    f"{json.dumps(v)[:40]} ({type(v).__name__}); pass the trace "
                    f"torch.profiler wrote (torch writes {key} as a number), or fix the value")
    return None
