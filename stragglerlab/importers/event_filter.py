"""Drop trace events a reader would discard from the JSON bytes, before they are parsed.

    skip = EventSkip(ph="X", cat="cpu_op", keep_names=("ProfilerStep#", ...), keep_exact=(...))
    body, n = select(data, cut, pos, depth, quotes, skip)   # the kept events' bytes, events seen

Why: in a Kineto trace most bytes are CPU ops (with record_shapes args) and
flow events that the general op model never looks at; building a Python dict
for each costs more than everything else the reader does. Here an event is
dropped when its own top-level key (depth 1, outside any string) says so:

* `"ph"` is a string other than `skip.ph`;
* `"cat"` is `skip.cat` and its `"name"` starts with none of `keep_names`
  and is none of `keep_exact`.

How: from the unescaped quote positions the reader already has, the strings
of a chunk are known; a key is a string at depth 1 followed by ':' (at most
two blanks around it) and a string value; the values are compared byte for
byte with numpy, no Python per event. Anything not positively matched is kept
and parsed as before (a name with a backslash escape, wider spacing, a value
that is not a string, a missing key), so the reader sees every event it would
have kept. Keys are assumed unique within an event (RFC 8259;
torch writes them once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EventSkip:
    """Which events select() drops; see the module doc."""

    ph: str
    """The only phase kept ('X' for complete events)."""
    cat: str
    """A category whose events are dropped unless their name is kept."""
    keep_names: tuple[str, ...]
    """Name prefixes kept in that category."""
    keep_exact: tuple[str, ...]
    """Whole names kept in that category."""


class _Strings:
    """The JSON strings of a chunk (between consecutive unescaped quotes) and helpers."""

    def __init__(self, a: np.ndarray, cut: int, quotes: np.ndarray, pos: np.ndarray,
                 depth: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        q = quotes[quotes < cut]
        q = q[: q.size - q.size % 2]
        self.a, self.n = a, a.size
        self.open, self.close = q[0::2], q[1::2]
        self.length = self.close - self.open - 1
        self.pos, self.depth, self.starts, self.ends = pos, depth, starts, ends
        bs = np.flatnonzero(a[:cut] == 92)
        self.escaped = np.searchsorted(bs, self.open) < np.searchsorted(bs, self.close)
        self.keys = np.arange(max(self.open.size - 1, 0))
        """Strings that a string follows (a key with a string value, among others)."""

    def equals(self, j: np.ndarray, text: bytes, prefix: bool = False) -> np.ndarray:
        """Which strings j are text (or start with it), byte for byte."""
        ln = self.length[j]
        hit = np.flatnonzero(ln >= len(text) if prefix else ln == len(text))
        for k, c in enumerate(text):  # one byte at a time over the shrinking candidates
            if not hit.size:
                break
            hit = hit[self.a[self.open[j[hit]] + 1 + k] == c]
        out = np.zeros(j.size, dtype=bool)
        out[hit] = True
        return out

    def pairs(self, key: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(event index, value string index) of each top-level `"key": "<string>"` pair."""
        j = np.flatnonzero(self.equals(self.keys, key))
        if not j.size:
            return j, j
        # only ':' and at most 2 blanks between the key and a string value
        gap = self.open[j + 1] - self.close[j] - 1
        colons = np.zeros(j.size, dtype=np.int64)
        ok = (gap >= 1) & (gap <= 3)
        for k in (1, 2, 3):
            c = self.a[np.minimum(self.close[j] + k, self.n - 1)]
            inside = k <= gap
            colons += inside & (c == 58)
            ok &= ~inside | (c == 58) | (c == 32) | (c == 10) | (c == 13) | (c == 9)
        ok &= colons == 1
        at = self.open[j]
        k = np.searchsorted(self.pos, at) - 1  # the last structure character before the key
        ok &= (k >= 0) & (self.depth[np.maximum(k, 0)] == 1)
        ev = np.searchsorted(self.starts, at, side="right") - 1
        ok &= (ev >= 0) & (at < self.ends[np.maximum(ev, 0)])
        return ev[ok], j[ok] + 1


def select(data: bytes, cut: int, pos: np.ndarray, depth: np.ndarray, quotes: np.ndarray,
           skip: EventSkip) -> tuple[bytes, int]:
    """The bytes of the events in data[:cut] that skip keeps, comma-separated, and the
    number of top-level objects seen. pos/depth/quotes: stream_json._structure of data."""
    inside = pos < cut
    pos, depth = pos[inside], depth[inside]
    a = np.frombuffer(data, np.uint8)
    ch = a[pos]
    starts = pos[(depth == 1) & (ch == 123)]
    ends = pos[(depth == 0) & (ch == 125)]
    if starts.size != ends.size or not starts.size:  # not a plain list of objects: keep all
        return data[:cut], int(starts.size)
    s = _Strings(a, cut, quotes, pos, depth, starts, ends)
    drop = np.zeros(starts.size, dtype=bool)
    ev, v = s.pairs(b"ph")
    drop[ev[~s.escaped[v] & ~s.equals(v, skip.ph.encode())]] = True
    in_cat = np.zeros(starts.size, dtype=bool)
    ev, v = s.pairs(b"cat")
    in_cat[ev[s.equals(v, skip.cat.encode())]] = True
    ev, v = s.pairs(b"name")
    kept = s.escaped[v].copy()  # an escaped name may decode to a kept one: parse it
    for n in skip.keep_names:
        kept |= s.equals(v, n.encode(), prefix=True)
    for n in skip.keep_exact:
        kept |= s.equals(v, n.encode())
    in_cat[ev[kept]] = False
    drop |= in_cat
    if not drop.any():
        return data[:cut], int(starts.size)
    keep = np.flatnonzero(~drop)
    nxt = np.r_[starts[1:], cut]  # each kept event with the separator after it
    mv = memoryview(data)
    body = b"".join([mv[b:e] for b, e in zip(starts[keep].tolist(), nxt[keep].tolist())])
    return body, int(starts.size)
