"""Read a Chrome trace (gzipped or plain) with bounded memory: the `traceEvents` array
streamed in batches of events, everything else as one small header dict.

    reader = TraceReader(path)
    for batch in reader.batches():         # lists of event dicts, ~BATCH_BYTES of JSON each
        ...
    reader.header                          # the document without traceEvents (after the loop)

How: the (decompressed) bytes are read in chunks; numpy finds the JSON
structure characters outside strings and the depth they leave, so each chunk
is cut after its last complete event and that slice is parsed by orjson as one
list. Memory holds one chunk and one batch of dicts, never the whole file.
gzip input is inflated with an output cap per call; a file that inflates past
`max_bytes`, or (past the first RATIO_GRACE_BYTES) more than `max_ratio` times
its compressed size, is refused as a gzip bomb before it is held anywhere.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from stragglerlab.importers.chrome import (
    FIX,
    GZIP_MAGIC,
    TRACE_OBJECT,
    TWICE,
    bytes_problem,
    shape_problem,
)
from stragglerlab.importers.event_filter import EventSkip, select
from stragglerlab.util.errors import InputError

BATCH_BYTES = 2 << 20
"""JSON bytes parsed per batch of events."""
READ_BYTES = 1 << 20
"""Compressed (or plain) bytes read per call."""
MAX_BYTES = 64 << 30
"""Largest decompressed trace accepted (64 GiB)."""
MAX_RATIO = 100.0
"""Largest decompressed/compressed ratio accepted past RATIO_GRACE_BYTES (Kineto JSON
compresses 5-20x; a bomb 1000x)."""
RATIO_GRACE_BYTES = 64 << 20
"""Decompressed bytes read before the ratio is checked (small files may compress well)."""
MAX_EVENT_BYTES = 256 << 20
"""Largest single event, and largest header or footer, accepted."""
KEY = b'"traceEvents"'


@dataclass(kw_only=True)
class Inflater:
    """A byte source over a file: plain, or gzip inflated with the bomb checks."""

    path: Path
    """The file."""
    max_bytes: int = MAX_BYTES
    """Refuse past this many decompressed bytes."""
    max_ratio: float = MAX_RATIO
    """Refuse past this decompressed/compressed ratio (after RATIO_GRACE_BYTES)."""
    bytes_in: int = 0
    """Compressed bytes consumed so far."""
    bytes_out: int = 0
    """Decompressed bytes produced so far."""

    def chunks(self) -> Iterator[bytes]:
        """The decompressed bytes, READ_BYTES-ish at a time."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(16)
                f.seek(0)
                if problem := bytes_problem(head, self.path.name):  # empty, a zip, ...
                    raise InputError(problem, str(self.path))
                if head[:2] == GZIP_MAGIC:
                    yield from self._gunzip(f)
                    return
                while block := f.read(READ_BYTES):
                    self.bytes_in += len(block)
                    self._count(len(block))
                    yield block
        except OSError as e:
            raise InputError(f"cannot read the trace: {e.strerror or e}", str(self.path)) \
                from None

    def _gunzip(self, f) -> Iterator[bytes]:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            while True:
                block = f.read(READ_BYTES)
                if not block:
                    break
                self.bytes_in += len(block)
                data = block
                while data:
                    out = d.decompress(data, READ_BYTES)
                    self._count(len(out))
                    if out:
                        yield out
                    data = d.unconsumed_tail
                    if d.eof and d.unused_data:  # a second gzip member
                        rest = d.unused_data
                        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                        data = rest
            if not d.eof:
                raise InputError(f"gzip data is truncated (the stream ends after "
                                 f"{self.bytes_out:,} bytes); {FIX}", str(self.path))
        except zlib.error as e:
            raise InputError(f"gzip data is corrupt ({e}); {FIX}", str(self.path)) from None

    def _count(self, n: int) -> None:
        self.bytes_out += n
        if self.bytes_out > self.max_bytes:
            raise InputError(f"refused: decompresses past {self.max_bytes / 2**30:.3g} GiB "
                             "(a gzip bomb or not a trace); pass the per-rank trace files",
                             str(self.path))
        if self.bytes_out > RATIO_GRACE_BYTES and \
                self.bytes_out > self.max_ratio * max(self.bytes_in, 1):
            raise InputError(f"refused as a gzip bomb: {self.bytes_in:,} compressed bytes "
                             f"inflate to more than {self.bytes_out:,} ({self.max_ratio:.0f}x "
                             "is the most a trace compresses); pass the profiler's export",
                             str(self.path))


def _structure(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, depth after each) of the JSON structure characters {}[] outside
    strings of a chunk that starts outside any string, and the unescaped quotes."""
    quotes = np.flatnonzero(a == 34)
    if quotes.size:
        cand = quotes[(quotes > 0) & (a[np.maximum(quotes - 1, 0)] == 92)]
        if cand.size:  # a quote after backslashes is escaped when the run is odd
            drop = []
            for q in cand.tolist():
                i = q - 1
                while i >= 0 and a[i] == 92:
                    i -= 1
                if (q - 1 - i) % 2:
                    drop.append(q)
            quotes = np.setdiff1d(quotes, np.asarray(drop, dtype=quotes.dtype))
    pos = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
    if pos.size and quotes.size:
        pos = pos[np.searchsorted(quotes, pos) % 2 == 0]
    ch = a[pos]
    depth = np.cumsum(np.where((ch == 123) | (ch == 91), 1, -1))
    return pos, depth, quotes


def _not_an_object(buf: bytes) -> str:
    """Why a document whose first bytes `buf` start with neither '{' nor '[' is no trace:
    a JSON scalar (null, 42, "x", true) named as such, else not JSON at all."""
    if buf.lstrip()[:2] == GZIP_MAGIC:
        return TWICE
    try:
        doc = orjson.loads(buf)  # a scalar is short: the first read holds all of it
    except orjson.JSONDecodeError:
        return f"not valid JSON (starts with {buf.lstrip()[:20]!r}); {FIX}"
    return shape_problem(doc) or f"not valid JSON (starts with {buf.lstrip()[:20]!r}); {FIX}"


@dataclass(kw_only=True)
class TraceReader:
    """Stream one Chrome trace's events in batches; see the module doc."""

    path: Path
    """The file (gzip or plain JSON)."""
    max_bytes: int = MAX_BYTES
    """Decompressed-size cap."""
    max_ratio: float = MAX_RATIO
    """Compression-ratio cap."""
    header: dict = field(default_factory=dict)
    """Top-level keys other than traceEvents; filled once batches() is exhausted."""
    events: int = 0
    """Events read so far."""
    source: Inflater | None = None
    """The byte source (bytes_in / bytes_out for progress)."""
    skip: EventSkip | None = None
    """Events dropped from the bytes before parsing (event_filter.select); None: none."""

    def _bad(self, msg: str) -> InputError:
        return InputError(msg, str(self.path))

    def batches(self) -> Iterator[list]:
        """Lists of events (each item as orjson parsed it; callers skip non-dicts)."""
        self.source = Inflater(path=Path(self.path), max_bytes=self.max_bytes,
                               max_ratio=self.max_ratio)
        chunks = self.source.chunks()
        prefix, rest = self._find_array(chunks)
        carry = rest
        offset = len(prefix)
        need = BATCH_BYTES
        while True:
            parts, size, eof = [carry], len(carry), False
            while size < need or len(parts) == 1:  # at least one new block
                block = next(chunks, None)
                if block is None:
                    eof = True
                    break
                parts.append(block)
                size += len(block)
            data = b"".join(parts)
            pos, depth, quotes = _structure(np.frombuffer(data, np.uint8))
            end = np.flatnonzero(depth < 0)
            if end.size:  # the array closes in this chunk
                cut = int(pos[end[0]])
                yield self._parse(data, cut, offset, pos, depth, quotes)
                footer = data[cut + 1:]
                break
            if eof:
                raise self._bad(f"not valid JSON: the file ends inside traceEvents after "
                                f"{self.events:,} events (truncated?); {FIX}")
            closes = np.flatnonzero(depth == 0)
            if closes.size:
                cut = int(pos[closes[-1]]) + 1
                yield self._parse(data, cut, offset, pos, depth, quotes)
                offset += cut
                carry, need = data[cut:], BATCH_BYTES
            else:  # no complete event yet: read twice as much before scanning again
                carry, need = data, 2 * len(data)
            if len(carry) > MAX_EVENT_BYTES:
                raise self._bad(f"an event is larger than {MAX_EVENT_BYTES >> 20} MiB near "
                                f"byte {offset:,}: not a trace event list; {FIX}")
        for block in chunks:
            footer += block
            if len(footer) > MAX_EVENT_BYTES:
                raise self._bad("more than 256 MiB after traceEvents: not a Chrome trace")
        try:
            doc = orjson.loads(prefix + b"[]" + footer)
        except orjson.JSONDecodeError as e:
            raise self._bad(f"not valid JSON around traceEvents ({e}); {FIX}") from None
        if not isinstance(doc, dict):
            raise self._bad("not a Chrome trace (the document is not an object)")
        doc.pop("traceEvents", None)
        self.header = doc

    def _find_array(self, chunks: Iterator[bytes]) -> tuple[bytes, bytes]:
        """(bytes up to the traceEvents '[', bytes after it)."""
        buf, searched = b"", 0
        for block in chunks:
            buf += block
            start = max(0, searched - len(KEY))  # only the new bytes (and a key split there)
            searched = len(buf)
            while (k := buf.find(KEY, start)) >= 0:
                a = np.frombuffer(buf[:k], np.uint8)
                pos, depth, _ = _structure(a)
                quotes = int(np.count_nonzero(a == 34))  # escapes aside: headers have none
                if (depth[-1] if depth.size else 0) == 1 and quotes % 2 == 0:
                    j = k + len(KEY)
                    tail = buf[j:].lstrip()
                    if len(tail) < 2:
                        searched = k + len(KEY)  # need more bytes: look here again
                        break
                    if tail[:1] == b":" and tail[1:].lstrip()[:1] == b"[":
                        body = tail[1:].lstrip()
                        cut = len(buf) - len(body)
                        return buf[:cut], buf[cut + 1:]
                    if tail[:1] == b":" and not tail[1:].strip():
                        searched = k + len(KEY)
                        break
                    raise self._bad("not a Chrome trace ('traceEvents' is not a list); pass "
                                    "files written by torch.profiler's export_chrome_trace")
                start = k + 1
            else:
                if len(buf) > MAX_EVENT_BYTES:
                    break
                head = buf.lstrip()[:1]
                if head == b"[":  # JSON, or a start of it, of another shape
                    raise self._bad(f"a JSON list, {TRACE_OBJECT}")
                if head not in (b"", b"{"):
                    raise self._bad(_not_an_object(buf))
                continue
        if not buf.strip():  # gzip of nothing, or only whitespace
            raise self._bad(f"holds no JSON ({len(buf)} bytes of nothing"
                            f"{' after inflating' if self.source.bytes_in > len(buf) else ''})"
                            f"; {FIX}")
        if len(buf) <= MAX_EVENT_BYTES:
            try:  # the whole document is here: an object that breaks off was truncated
                orjson.loads(buf)
            except orjson.JSONDecodeError as e:
                raise self._bad(f"not valid JSON, probably truncated "
                                f"({str(e).splitlines()[0]}); {FIX}") from None
        raise self._bad("not a Chrome trace (no 'traceEvents' list); pass files written by "
                        "torch.profiler's export_chrome_trace or tensorboard_trace_handler")

    def _parse(self, data: bytes, cut: int, offset: int, pos: np.ndarray, depth: np.ndarray,
               quotes: np.ndarray) -> list:
        """The events in data[:cut] (pos/depth/quotes: _structure(data))."""
        if self.skip is not None:
            seg, seen = select(data, cut, pos, depth, quotes, self.skip)
        else:
            seg, seen = data[:cut], -1
        body = seg.strip().strip(b",").strip()
        if not body:
            self.events += max(seen, 0)
            return []
        try:
            out = orjson.loads(b"[" + body + b"]")
        except orjson.JSONDecodeError as e:
            raise self._bad(f"not valid JSON in traceEvents after byte {offset:,} ({e}); "
                            f"{FIX}") from None
        self.events += seen if seen >= 0 else len(out)
        return out
