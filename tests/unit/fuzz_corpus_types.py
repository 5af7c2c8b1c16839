"""Fuzz cases written from classes of mistakes the other corpora did not reach (issue 33):
a parquet column of a type no trace has, a Kineto event field of the wrong type or out of
any time's range, and outputs placed where nothing can be written.

Each class is generated over the columns or fields it applies to, not listed case by case:
* trace column types: every numeric schema column as text of numbers, a list, a struct,
  binary, and every integer column as uint64 past int64; a repeated column name;
* Kineto events: ts and dur as text, a list, a bool, NaN, infinity or an integer too large
  for a float; dur negative; args not an object; nesting far past any trace; world_size
  and rank outside any job; baseTimeNanoseconds not a time;
* outputs: a folder on /proc or /sys, the fixed output file name taken by a folder; a
  rank status file of another shape.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stragglerlab.trace.schema import TRACE_COLUMNS
from tests.unit.fuzz_corpus import Base, Case, _copy_run

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto" / "dp2-pp2"


def _arrow_trace(column: str, make) -> callable:
    """The base trace with one column replaced by `make(n) -> pa.Array` (or appended)."""
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(base.run / "trace.parquet")
        arr = make(table.num_rows, table)
        names = table.schema.names
        if column in names and not column.startswith("+"):
            table = table.set_column(names.index(column), column, arr)
        else:
            table = table.append_column(column.lstrip("+"), arr)
        path = d / "trace.parquet"
        pq.write_table(table, path)
        return ["whatif", "--trace", str(path), "--out", str(d / "out")], str(path), d / "out"
    return build


def trace_type_cases() -> list[Case]:
    """Every numeric schema column in every wrong arrow type, and ints past int64."""
    numeric = [c.name for c in TRACE_COLUMNS if c.kind in ("int", "float")]
    wrong = {
        "text": lambda n, t, c: pa.array([str(x) for x in t.column(c).to_pylist()]),
        "list": lambda n, t, c: pa.array([[1.0]] * n),
        "struct": lambda n, t, c: pa.array([{"a": 1.0}] * n),
        "binary": lambda n, t, c: pa.array([b"\x00\x01"] * n),
    }
    cases = [Case(f"type-{col}-{kind}", "whatif",
                  _arrow_trace(col, lambda n, t, c=col, f=f: f(n, t, c)))
             for col in numeric for kind, f in wrong.items()]
    ints = [c.name for c in TRACE_COLUMNS if c.kind == "int"]
    cases += [Case(f"type-{col}-uint64-past-int64", "whatif", _arrow_trace(
        col, lambda n, t: pa.array(np.full(n, 2**63 + 5, dtype=np.uint64)))) for col in ints]
    cases.append(Case("type-repeated-column", "whatif", _arrow_trace(
        "+step", lambda n, t: t.column("step"))))
    return cases


def _kineto(mutate) -> callable:
    """The dp2-pp2 Kineto fixture with rank 0's document changed by `mutate(doc)`, which
    returns the new document or the file's text."""
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        for p in sorted(KINETO.iterdir()):
            raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
            name = p.name.removesuffix(".gz")
            doc = json.loads(raw)
            if name == "rank0.json":
                doc = mutate(copy.deepcopy(doc))
            (d / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
        out = d / "out"
        return ["import", "kineto", "--traces", str(d), "--out", str(out)], \
            str(d / "rank0.json"), out
    return build


def _events(field: str, value) -> callable:
    def mutate(doc):
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("name") == "forward-compute":
                e[field] = value
        return doc
    return mutate


def _nan_text(field: str, token: str) -> callable:
    def mutate(doc):
        text = json.dumps(doc)
        needle = f'"{field}": '
        i = text.index(needle, text.index('"forward-compute"')) + len(needle)
        j = min(text.index(",", i), text.index("}", i))
        return text[:i] + token + text[j:]
    return mutate


def kineto_cases() -> list[Case]:
    """Event times and args of every wrong shape; layout and clock fields out of range."""
    bad_times = {"text": "12", "list": [12.0], "bool": True, "int-past-float": 10**400,
                 "past-any-time": 1e30}
    cases = [Case(f"kineto-{field}-{kind}", "import", _kineto(_events(field, v)))
             for field in ("ts", "dur") for kind, v in bad_times.items()]
    cases += [Case(f"kineto-{field}-{token.lower()}", "import", _kineto(_nan_text(field, token)))
              for field in ("ts", "dur") for token in ("NaN", "Infinity", "-Infinity")]
    cases += [
        Case("kineto-dur-negative", "import", _kineto(_events("dur", -3.0))),
        Case("kineto-args-text", "import", _kineto(_events("args", "x"))),
        Case("kineto-args-list", "import", _kineto(_events("args", [1]))),
        Case("kineto-nesting-100k", "import", _kineto(
            lambda doc: '{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}")),
        Case("kineto-base-time-text", "import", _kineto(
            lambda doc: {**doc, "baseTimeNanoseconds": "soon"})),
        Case("kineto-base-time-past-float", "import", _kineto(
            lambda doc: {**doc, "baseTimeNanoseconds": 10**400})),
    ]
    for name, world, rank in (("world-2e40", 2**40, 0), ("world-zero", 0, 0),
                              ("rank-past-world", 4, 9), ("rank-negative", 4, -1)):
        def mutate(doc, world=world, rank=rank):
            doc["distributedInfo"].update(world_size=world, rank=rank)
            return doc
        cases.append(Case(f"kineto-{name}", "import", _kineto(mutate)))
    return cases


def _out_taken(verb: str, name: str) -> callable:
    """The verb's fixed output file name already taken by a folder."""
    def build(d: Path, base: Base):
        run = _copy_run(base, d)
        out = d / "out"
        (out / name).mkdir(parents=True)
        argv = {"detect": ["detect", "--run", str(run), "--out", str(out)],
                "score": ["score", "--runs", str(run), "--detector", "whatif",
                          "--offline-only", "--out", str(out)]}[verb]
        return argv, str(out / name), out
    return build


def _pseudo_fs(verb: str, where: str) -> callable:
    def build(d: Path, base: Base):
        argv = {"whatif": ["whatif", "--trace", str(base.run / "trace.parquet")],
                "detect": ["detect", "--run", str(base.run)],
                "synth": ["synth"]}[verb]
        return [*argv, "--out", where], where, Path(where)
    return build


def _status(content: str) -> callable:
    def build(d: Path, base: Base):
        run = _copy_run(base, d)
        (run / "status").mkdir(exist_ok=True)
        (run / "status" / "rank0.json").write_text(content)
        return ["detect", "--run", str(run), "--out", str(d / "out")], \
            str(run / "status" / "rank0.json"), d / "out"
    return build


def output_cases() -> list[Case]:
    """Outputs where nothing can be written, names taken by folders, status files of
    another shape."""
    cases = [Case(f"out-{verb}-on-{fs.strip('/').replace('/', '-')}", verb, _pseudo_fs(verb, fs))
             for verb in ("whatif", "detect", "synth") for fs in ("/proc/fz-out", "/sys/fz-out")]
    cases += [Case("out-detect-name-taken", "detect", _out_taken("detect", "whatif.json")),
              Case("out-score-name-taken", "score", _out_taken("score", "scores.json"))]
    cases += [Case(f"status-{kind}", "detect", _status(text)) for kind, text in (
        ("list", "[1, 2]"), ("number", "7"), ("text", '"step 3"'), ("step-text", '{"step": "3"}'),
        ("step-bool", '{"step": true}'), ("step-below-minus-one", '{"step": -5}'))]
    return cases


def type_cases() -> list[Case]:
    """Every case of this module."""
    return trace_type_cases() + kineto_cases() + output_cases()
