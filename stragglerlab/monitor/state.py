"""What the monitor publishes: the window history in memory, shared by the loop and the server.

The loop thread adds lines; the web server's handlers read snapshots. Every
line gets a sequence number (`seq`, its index in the history), so a page that
reconnects asks for what came after the last it has (`/events?after=N`), and
a browser reload gets the whole history back from `/api/windows`.

    state = MonitorState("results/x/0")
    state.add(window_line); state.since(after=-1); state.latest_window()
"""

from __future__ import annotations

import json
import threading

from stragglerlab.util.atomic import dumps_json

MAX_KEPT_LINES = 5000
"""History lines kept in memory for the page (the file keeps all of them)."""
MAX_KEPT_BYTES = 64 * 1024 * 1024
"""...and at most this many bytes of them (a window line grows with the workers: about
12 KB at 1,024); the oldest go first."""


class MonitorState:
    """The published history, the job layout and whether the monitor finished."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.lock = threading.Lock()
        self.lines: list[tuple[int, bytes]] = []
        """(seq, the line as compact strict JSON): about 12 KB for a 1,024-worker window,
        against about 120 KB as Python objects; the page is sent these bytes as they are."""
        self.kept_bytes = 0
        self._latest: dict | None = None
        self.first_seq = 0
        self.windows_analysed = 0
        self.errors = 0
        self.layout: tuple[int, int] | None = None
        self.finished = False
        self.run_ended = False
        self.nodes: list[dict] = []
        """A cluster run's nodes (nodes.json, monitor.nodes.NodesView.summary); [] on one host."""

    @property
    def version(self) -> int:
        """Sequence number the next line will get (changes whenever a line is added)."""
        return self.first_seq + len(self.lines)

    def load(self, lines: list[dict]) -> None:
        """Start from a history read back from windows.jsonl."""
        for line in lines:
            self.add(line)

    def add(self, line: dict) -> None:
        """Publish one history line."""
        with self.lock:
            line = dict(line, seq=self.version)
            data = dumps_json(line, indent=None).rstrip(b"\n")
            self.lines.append((line["seq"], data))
            self.kept_bytes += len(data)
            if line.get("kind") == "window":
                self._latest = json.loads(data)  # as the page reads it (NaN -> null)
                self.windows_analysed += 1
                if self.layout is None:
                    self.layout = (line["dp_size"], line["pp_size"])
            elif line.get("kind") == "error":
                self.errors += 1
            drop = 0
            while len(self.lines) - drop > 1 and (
                    len(self.lines) - drop > MAX_KEPT_LINES or self.kept_bytes > MAX_KEPT_BYTES):
                self.kept_bytes -= len(self.lines[drop][1])
                drop += 1
            if drop:
                del self.lines[:drop]
                self.first_seq += drop

    def set_layout(self, dp: int, pp: int) -> None:
        """The job's layout, once known."""
        with self.lock:
            self.layout = (dp, pp)

    def set_nodes(self, nodes: list[dict]) -> None:
        """A cluster run's nodes as nodes.json last said (which are lost, their ranks)."""
        with self.lock:
            self.nodes = nodes

    def finish(self, run_ended: bool) -> None:
        """The loop stopped (the run ended, or the monitor was stopped)."""
        with self.lock:
            self.finished, self.run_ended = True, run_ended

    def since(self, after: int = -1) -> list[dict]:
        """Lines with seq > after, oldest first."""
        return [json.loads(data) for _, data in self.since_json(after)]

    def since_json(self, after: int = -1) -> list[tuple[int, bytes]]:
        """(seq, JSON bytes) of the lines with seq > after, oldest first."""
        with self.lock:
            start = max(0, after + 1 - self.first_seq)
            return self.lines[start:]

    def latest_window(self) -> dict | None:
        """The latest analysed window, or None."""
        with self.lock:
            return self._latest

    def summary(self) -> dict:
        """Counts and status for the page's header."""
        with self.lock:
            return {"run": self.run, "windows_analysed": self.windows_analysed,
                    "errors": self.errors, "version": self.version,
                    "layout": list(self.layout) if self.layout else None,
                    "finished": self.finished, "run_ended": self.run_ended,
                    "nodes": self.nodes, "lost_ranks": sorted(
                        r for n in self.nodes if n["lost"] for r in n["ranks"])}
