"""Shared by the monitor's slow browser and Prometheus tests (and the headless Chromium
they drive: `browser_or_skip`, `chromium_page`): a run folder that grows a
step at a time from a `synth` trace (DP 2 x PP 2, the victim DP 1 / stage 1 twice as slow
from step FAULT_FIRST on), watched by `stragglerlab monitor` on 127.0.0.1, any free port."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.run.run_folder import RunFolder

FAULT_FIRST = 3
"""The victim (DP 1, stage 1) is twice as slow from this step on."""
VICTIM = (1, 1)
STEPS = 14
WINDOW = 4
"""--window-steps."""


def which(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env] if os.access(os.environ[env], os.X_OK) else None
    return next((p for p in map(shutil.which, names) if p), None)


def text(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def query(url: str, promql: str) -> list[dict]:
    """A Prometheus server's instant query result (its /api/v1/query)."""
    data = json.loads(text(url + "api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert data["status"] == "success", data
    return data["data"]["result"]


def wait_for(what: str, check, timeout: float, every: float = 0.1):
    """check()'s first truthy value within timeout (s), else a failure naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def drain(stream, into: list[str]) -> None:
    """Read a pipe line by line into a list (so it never fills up)."""
    for line in stream:
        into.append(line)


class LiveRun:
    """A run folder that grows a step at a time, and `stragglerlab monitor` on it."""

    def __init__(self, run: Path) -> None:
        self.src = run.parent / "synth"
        assert main(["synth", "--out", str(self.src), "--dp", "2", "--pp", "2", "--steps",
                     str(STEPS), "--slow", f"{VICTIM[0]},{VICTIM[1]},2.0,{FAULT_FIRST}",
                     "--quiet"]) == 0
        self.run = run
        run.mkdir(parents=True)  # as a job's launcher makes it, before any step
        self.feeder = PartsFeeder(run, RunFolder(path=self.src).trace())
        self.written = -1
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stragglerlab", "monitor", "--run", str(run),
             "--host", "127.0.0.1", "--port", "0", "--window-steps", str(WINDOW),
             "--poll", "0.1", "--dp", "2", "--pp", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.out: list[str] = []
        for stream, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out)):
            threading.Thread(target=drain, args=(stream, into), daemon=True).start()
        line = wait_for("the monitor's 'monitor page:' line",
                     lambda: next((x for x in self.err if "monitor page: " in x), None)
                     or (self.proc.poll() is not None and pytest.fail(
                         "the monitor exited: " + "".join(self.err)[-3000:])), 60)
        self.url = line.split("monitor page: ")[1].split()[0]
        assert self.url.startswith("http://127.0.0.1:"), line
        self.hostport = self.url.split("//")[1].rstrip("/")

    def grow(self, to_step: int) -> None:
        """Write the steps up to `to_step` (inclusive), as the job would."""
        for step in range(self.written + 1, to_step + 1):
            # On the tracer's clock the step ends now, when it is flushed (so the page's
            # lag from a step's end is the monitor's, not this test's pace).
            ops = self.feeder.by_step[step]
            self.feeder.offsets[step] = time.monotonic() - float(
                (ops["start_ts"] + ops["duration"]).max())
            self.feeder.write_step(step)
            self.written = step

    def end(self) -> None:
        """The run ends: faults.json (the ground truth), then run.json are written (the
        monitor stops by itself)."""
        shutil.copy(self.src / "faults.json", self.run / "faults.json")
        (self.run / "run.json").write_text("{}")

    def last_step(self) -> int:
        """The monitor's latest analysed step (-1: none yet)."""
        lines = json.loads(text(self.url + "api/windows"))["lines"]
        return max((x["step"] for x in lines if x["kind"] == "window"), default=-1)

    def stop(self) -> str:
        """SIGTERM by PID (killed after 20 s); its stderr. Idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return "".join(self.err)


@contextlib.contextmanager
def chromium_page(sync_playwright, chromium: str, problems: list[str]):
    """A page of the system's headless Chromium, 1280 x 1000; console errors and page
    errors are appended to `problems`. The browser closes on exit."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: m.type == "error" and problems.append(
                f"console error: {m.text} ({m.location})"))
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            yield page
        finally:
            browser.close()


def browser_or_skip():
    """(playwright's sync_playwright, the Chromium binary); a skip saying why when either
    is absent."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    chromium = which("STRAGGLERLAB_CHROMIUM", "chromium", "chromium-browser", "google-chrome")
    if chromium is None:
        pytest.skip("no Chromium: none on PATH, and $STRAGGLERLAB_CHROMIUM unset or not "
                    "executable (apt-get install chromium)")
    return sync_playwright, chromium
