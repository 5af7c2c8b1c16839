"""Streaming a node's run-folder files to the monitor's host: a frame format, a reader, a receiver.

On a Ray cluster without a shared filesystem, a rank on another node writes its
trace part (`trace-parts/rank<r>.bin`), GC log (`gc/rank<r>.jsonl`) and status
(`status/rank<r>.json`) on that node. Its node's helper reads what is new
(`read_frames`, on the node) and the driver or the monitor writes it into the
run folder on its own host (`PartReceiver.accept`), where the monitor tails it
as if the ranks were local. Pure: files and bytes, no Ray (workloads.
cluster_stream moves the bytes through Ray's actor calls).

A frame is a 28-byte header and a payload:

    magic b"SLPS" | version u8 | kind u8 | reserved u16 | rank u32 | offset u64 |
    length u32 | crc32 u32 (of the payload)

* `Kind.PART`: `length` bytes of the rank's trace part from byte `offset`:
  whole 46-byte records (stragglerlab.trace.trace_parts), checked like the monitor's
  tail checks them before anything is written.
* `Kind.GC`: bytes of the rank's GC log from `offset`: whole JSON lines.
* `Kind.STATUS`: the rank's whole status file (a JSON object); `offset` is its
  modification time in ns on the node, so an older one never replaces a newer.

The receiver's guarantees:

* **Only a prefix of the node's file is ever visible.** Appended bytes go at
  the file's end in one `write`; the monitor's tail leaves a torn trailing
  record (or line) for its next look. A status file is rewritten in place
  (run_folder.write_status) after the rank's part bytes of the same batch, and the
  status folder's mtime is set once per batch, or once per round of every node's
  batch (`accept(mark=False)`, then `mark_statuses()`).
* **Duplicates are ignored** (bytes already on disk), an **overlap** writes
  only its new bytes, a frame **ahead of the file** (out of order, or after a
  lost one) waits in memory until the gap is filled (at most
  `max_pending_bytes`; beyond, the farthest frames are dropped: the sender
  re-reads from `positions()`).
* **Garbage is refused with one message naming the node** (bad magic,
  version, kind, checksum, a truncated frame, records that are not a tracer's):
  nothing of the refused frame, nor of the rest of its batch, is written; the
  receiver goes on with the next batch.
* **Restart.** A new receiver on the same folder starts from what is on disk:
  `positions()` are the files' sizes (a torn tail left by a killed writer is
  cut first), so a sender asked from there re-sends exactly what is missing.
  The node keeps its own files, so nothing is lost when the monitor's host
  restarts the receiver; no fsync is needed for that.

    frames = read_frames(node_run_dir, ranks=[2, 3], positions=receiver.positions())
    receipt = receiver.accept("node-b", frames)     # Receipt(written=..., errors=[...])
"""

from __future__ import annotations

import enum
import json
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stragglerlab.run.run_folder import (
    GC_DIR,
    STATUS_DIR,
    TRACE_PARTS_DIR,
    mark_status_folder,
    write_status,
)
from stragglerlab.trace.trace_parts import RECORD, check_records

MAGIC = b"SLPS"
"""The first four bytes of every frame."""
VERSION = 1
"""The frame format's version."""
HEADER = struct.Struct("<4sBBHIQII")
"""magic, version, kind, reserved, rank, offset, length, crc32 (28 bytes, little-endian)."""
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest payload one frame may carry: a longer `length` is garbage, not a frame."""
MAX_RANK = 1 << 20
"""Largest rank number a frame may name (a million ranks)."""
DEFAULT_MAX_PENDING_BYTES = 256 * 1024 * 1024
"""Bytes of out-of-order frames the receiver holds while waiting for the gap before them."""
DEFAULT_READ_BYTES = 16 * 1024 * 1024
"""Most bytes `read_frames` reads per file per call (the rest comes with the next call)."""
MAX_STATUS_BYTES = 64 * 1024
"""Largest status file sent (a rank's status is a line of JSON)."""


class Kind(enum.IntEnum):
    """What a frame carries."""

    PART = 1
    """Bytes appended to trace-parts/rank<r>.bin."""
    GC = 2
    """Bytes appended to gc/rank<r>.jsonl."""
    STATUS = 3
    """The whole status/rank<r>.json."""


_FILES = {Kind.PART: (TRACE_PARTS_DIR, ".bin"), Kind.GC: (GC_DIR, ".jsonl"),
          Kind.STATUS: (STATUS_DIR, ".json")}
_APPENDED = (Kind.PART, Kind.GC)


def rel_path(kind: Kind, rank: int) -> str:
    """The file a frame of `kind` for `rank` goes to, relative to the run folder."""
    folder, ext = _FILES[kind]
    return f"{folder}/rank{rank}{ext}"


def position_key(kind: Kind, rank: int) -> str:
    """The key of `positions()` for a file: `part:3`, `gc:3`, `status:3`."""
    return f"{kind.name.lower()}:{rank}"


def encode(kind: Kind, rank: int, offset: int, payload: bytes) -> bytes:
    """One frame."""
    return HEADER.pack(MAGIC, VERSION, int(kind), 0, rank, offset, len(payload),
                       zlib.crc32(payload)) + payload


@dataclass(kw_only=True)
class Frame:
    """One decoded frame."""

    kind: Kind
    """What it carries."""
    rank: int
    """The rank whose file it comes from."""
    offset: int
    """Byte offset of the payload in the rank's file (status: the file's mtime, ns)."""
    payload: bytes
    """The bytes."""


class GarbageError(ValueError):
    """A batch that is not frames of this format (the message says where and why)."""


def decode(data: bytes) -> tuple[list[Frame], str | None]:
    """The frames of a batch, up to the first that is not one, and why that one is not."""
    out: list[Frame] = []
    pos = 0
    while pos < len(data):
        where = f"at byte {pos} of {len(data)}"
        if len(data) - pos < HEADER.size:
            return out, (f"truncated frame {where}: {len(data) - pos} bytes, less than a "
                         f"{HEADER.size}-byte header")
        magic, version, kind, _res, rank, offset, length, crc = HEADER.unpack_from(data, pos)
        if magic != MAGIC:
            return out, f"no frame {where}: starts with {magic!r}, not {MAGIC!r}"
        if version != VERSION:
            return out, f"frame {where} is version {version}; this receiver reads {VERSION}"
        if kind not in Kind._value2member_map_:
            return out, f"frame {where} has kind {kind}, not one of {[int(k) for k in Kind]}"
        if rank > MAX_RANK or length > MAX_FRAME_BYTES:
            return out, (f"frame {where} names rank {rank} and {length} bytes: beyond "
                         f"{MAX_RANK} ranks or {MAX_FRAME_BYTES} bytes")
        body = pos + HEADER.size
        if len(data) - body < length:
            return out, (f"truncated frame {where}: its payload has {len(data) - body} of "
                         f"{length} bytes")
        payload = bytes(data[body:body + length])
        if zlib.crc32(payload) != crc:
            return out, f"frame {where} (rank {rank}): checksum mismatch, the payload is damaged"
        out.append(Frame(kind=Kind(kind), rank=rank, offset=offset, payload=payload))
        pos = body + length
    return out, None


# -- the node side ------------------------------------------------------------------------
def read_frames(run_dir: str | Path, ranks: list[int], positions: dict[str, int],
                max_bytes: int = DEFAULT_READ_BYTES,
                status_seen: dict[str, int] | None = None) -> bytes:
    """What the ranks' files in `run_dir` hold past `positions` (receiver.positions()), as
    one batch of frames: whole records of each trace part, whole lines of each GC log, and
    each status file newer than `status_seen` (updated in place; pass the same dict on
    every call to send a status once per change)."""
    run_dir = Path(run_dir)
    chunks = []
    for rank in ranks:
        for kind in _APPENDED:
            start = positions.get(position_key(kind, rank), 0)
            data = _read_from(run_dir / rel_path(kind, rank), start, max_bytes)
            if kind is Kind.PART:
                data = data[:len(data) - len(data) % RECORD.itemsize]
            else:
                data = data[:data.rfind(b"\n") + 1]
            if data:
                chunks.append(encode(kind, rank, start, data))
        path = run_dir / rel_path(Kind.STATUS, rank)
        try:
            mtime = path.stat().st_mtime_ns
            if status_seen is not None and status_seen.get(str(rank), -1) >= mtime:
                continue
            text = path.read_bytes()[:MAX_STATUS_BYTES]
        except OSError:
            continue
        if _json(text) is _TORN:
            continue  # caught mid-write (run_folder.write_status): sent at the next call
        if status_seen is not None:
            status_seen[str(rank)] = mtime
        chunks.append(encode(Kind.STATUS, rank, mtime, text))
    return b"".join(chunks)


_TORN = object()
"""`_json` of bytes that are not whole JSON (an empty, torn or foreign status file)."""


def _json(text: bytes) -> object:
    """A status file's JSON value, or _TORN. The node sends whole JSON of any shape and
    the receiver refuses one that is not an object, naming the node."""
    try:
        return json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _TORN


def _read_from(path: Path, start: int, max_bytes: int) -> bytes:
    try:
        if os.stat(path).st_size <= start:
            return b""  # nothing new (most files at most looks): no open
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max_bytes)
    except OSError:
        return b""


# -- the monitor's side -------------------------------------------------------------------
@dataclass(kw_only=True)
class Receipt:
    """What one batch did."""

    frames: int = 0
    """Frames decoded."""
    written_bytes: int = 0
    """Bytes written into the run folder (appends and status files)."""
    duplicates: int = 0
    """Frames whose bytes were already on disk (ignored)."""
    pending: int = 0
    """Frames held for later: they start past the end of their file."""
    statuses: int = 0
    """Status files written."""
    errors: list[str] = field(default_factory=list)
    """Why (part of) the batch was refused, each naming the node."""


@dataclass
class _File:
    """One appended file as the receiver knows it."""

    size: int = 0
    last_step: int = -1
    pending: dict[int, bytes] = field(default_factory=dict)


_RANK_NAME = re.compile(r"^rank(\d+)\.(bin|jsonl)$")


class PartReceiver:
    """Writes streamed frames into a run folder on this host, resumable from what is on disk."""

    def __init__(self, run_dir: str | Path,
                 max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> None:
        self.run_dir = Path(run_dir)
        self.max_pending_bytes = max_pending_bytes
        self.files: dict[tuple[Kind, int], _File] = {}
        self.status_mtime: dict[int, int] = {}
        self.dropped_frames = 0
        """Out-of-order frames dropped for want of room (re-sent from `positions()`)."""
        self.unmarked = 0
        """Status files written since the status folder's mtime was last set."""
        self._resume()

    def _resume(self) -> None:
        """Pick up the appended files already here, cutting a torn tail off each."""
        for kind in _APPENDED:
            folder = self.run_dir / _FILES[kind][0]
            if not folder.is_dir():
                continue
            for p in folder.iterdir():
                m = _RANK_NAME.match(p.name)
                if not m or p.suffix != _FILES[kind][1]:
                    continue
                raw_size = p.stat().st_size
                if kind is Kind.PART:
                    size = raw_size - raw_size % RECORD.itemsize
                else:
                    with open(p, "rb") as f:
                        size = f.read().rfind(b"\n") + 1
                if size != raw_size:
                    os.truncate(p, size)
                state = _File(size=size)
                if kind is Kind.PART and size:
                    with open(p, "rb") as f:
                        f.seek(size - RECORD.itemsize)
                        state.last_step = int(np.frombuffer(f.read(), dtype=RECORD)["step"][0])
                self.files[(kind, int(m[1]))] = state

    def positions(self) -> dict[str, int]:
        """Bytes on disk of every appended file (`part:R`, `gc:R`): where a sender resumes."""
        return {position_key(k, r): f.size for (k, r), f in sorted(self.files.items())}

    @property
    def pending_bytes(self) -> int:
        """Bytes held in out-of-order frames."""
        return sum(len(b) for f in self.files.values() for b in f.pending.values())

    def accept(self, node: str, data: bytes, *, mark: bool = True) -> Receipt:
        """Write a batch from `node`; garbage is refused (Receipt.errors), never raised.
        `mark=False`: leave the status folder's mtime to `mark_statuses`, called once
        after a round of every node's batch (a monitor woken by the first node's would
        look at a step that the other nodes' batches complete)."""
        receipt = Receipt()
        frames, problem = decode(data)
        receipt.frames = len(frames)
        for fr in frames:
            why = self._take(fr, receipt)
            if why:
                problem = why
                break
        if problem:
            receipt.errors.append(f"node {node}: {problem}; the rest of its batch is refused "
                                  "(its helper re-sends from what this host holds)")
        self.unmarked += receipt.statuses
        if mark:
            self.mark_statuses()
        self._bound_pending()
        return receipt

    def mark_statuses(self) -> None:
        """Set the status folder's mtime when statuses were written since the last mark."""
        if self.unmarked:
            mark_status_folder(self.run_dir / STATUS_DIR)
            self.unmarked = 0

    def _take(self, fr: Frame, receipt: Receipt) -> str | None:
        if fr.kind is Kind.STATUS:
            return self._status(fr, receipt)
        state = self.files.setdefault((fr.kind, fr.rank), _File())
        end = fr.offset + len(fr.payload)
        if end <= state.size:
            receipt.duplicates += 1
            return None
        if fr.offset > state.size:
            state.pending[fr.offset] = fr.payload
            receipt.pending += 1
            return None
        why = self._append(fr.kind, fr.rank, state, fr.payload[state.size - fr.offset:], receipt)
        if why:
            return why
        while state.pending:  # frames that waited for this one
            start = min(state.pending)
            if start > state.size:
                break
            payload = state.pending.pop(start)
            if start + len(payload) > state.size:
                why = self._append(fr.kind, fr.rank, state, payload[state.size - start:],
                                   receipt)
                if why:
                    return why
        return None

    def _append(self, kind: Kind, rank: int, state: _File, new: bytes,
                receipt: Receipt) -> str | None:
        name = rel_path(kind, rank)
        if kind is Kind.PART:
            if state.size % RECORD.itemsize or len(new) % RECORD.itemsize:
                return (f"{name}: {len(new)} bytes at byte {state.size} are not whole "
                        f"{RECORD.itemsize}-byte records")
            rec = np.frombuffer(new, dtype=RECORD)
            problem = check_records(rec, state.last_step)
            if problem:
                return (f"{name} (rank {rank}) at byte {state.size}: {problem}; not a trace "
                        "part written by the tracer (stragglerlab/trace/trace_parts.py)")
        elif not new.endswith(b"\n"):
            return f"{name} (rank {rank}) at byte {state.size}: not whole lines"
        path = self.run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if os.fstat(fd).st_size != state.size:
                return (f"{name}: {os.fstat(fd).st_size} bytes on disk where this receiver "
                        f"wrote {state.size} (another writer in the run folder?)")
            view = memoryview(new)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        state.size += len(new)
        receipt.written_bytes += len(new)
        if kind is Kind.PART:
            state.last_step = int(rec["step"][-1])
        return None

    def _status(self, fr: Frame, receipt: Receipt) -> str | None:
        if self.status_mtime.get(fr.rank, -1) >= fr.offset:
            receipt.duplicates += 1
            return None
        if not isinstance(_json(fr.payload), dict):
            return f"{rel_path(Kind.STATUS, fr.rank)}: not a JSON object"

        try:
            write_status(self.run_dir / rel_path(Kind.STATUS, fr.rank), fr.payload,
                         mark_folder=False)
        except OSError as e:
            return (f"{rel_path(Kind.STATUS, fr.rank)} on this host cannot be written "
                    f"({e.strerror}): remove what is there")
        receipt.statuses += 1
        self.status_mtime[fr.rank] = fr.offset
        receipt.written_bytes += len(fr.payload)
        return None

    def _bound_pending(self) -> None:
        while self.pending_bytes > self.max_pending_bytes:
            state, start = max(((f, s) for f in self.files.values() for s in f.pending),
                               key=lambda x: x[1] - x[0].size)
            del state.pending[start]
            self.dropped_frames += 1


NODES_JSON = "nodes.json"
"""RUN/nodes.json: a cluster run's nodes as the driver knows them while it runs."""
NODES_SCHEMA = "stragglerlab.nodes/1"
"""`schema` of nodes.json:

    {"schema": "stragglerlab.nodes/1", "reference_node": NODE_ID, "nodes": {NODE_ID: {
       "ranks": [2, 3], "ip": "10.0.0.2", "hostname": "b", "same_clock": false,
       "offset_s": 0.25, "uncertainty_s": 0.0004, "correction_s": 0.25,
       "streamed": true, "lost": false, "lost_at": null}}}

`correction_s` is subtracted from the node's ranks' trace times (the start measurement of
run.json `clock`; run.json's own correction, from the start and end measurements, is the
one the finished trace uses). `streamed`: its ranks' files reach this folder through the
part stream (the node does not share the driver's filesystem). `lost`: its helper stopped
answering or Ray reports the node dead (`lost_at`: wall-clock time it was found)."""
