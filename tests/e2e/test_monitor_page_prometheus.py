"""The live monitor's page in a real headless browser, and its /metrics scraped by a real
Prometheus server (issue 32, slow tier).

No training: a `synth` trace (DP 2 x PP 2, the victim DP 1 / stage 1 twice as slow
from step FAULT_FIRST on) is written into a tmp run folder's trace parts step by
step, as the ranks' tracers would write them (stragglerlab.monitor.feed.PartsFeeder,
the writer benchmarks/bench_monitor.py uses), and `stragglerlab monitor` watches it
on 127.0.0.1, any free port.

- The page, in Chromium (the distribution's package, driven by Playwright with the
  system browser: `playwright install` is never needed): it loads; it follows the run
  as it grows, step by step, without a reload; it draws the heatmap (a canvas with the
  victim's cell the hottest) and lists the finding naming the victim; a reload keeps
  the state; the run's end shows; no console error and no page error. A screenshot
  is kept: under $STRAGGLERLAB_ARTIFACTS when set, else the test's tmp folder (the
  path is printed; -s shows it).
- The page at 1,024 workers (a made-up 128 x 8 history, served in-process): it fits
  the window, the victim's cell is the hottest and hovering it names the worker.
- Prometheus (the distribution's `prometheus` binary, a tmp config and storage,
  127.0.0.1) scrapes /metrics every second; its query API must return the victim's
  `stragglerlab_worker_slowdown{dp_rank="1",stage="1"}` above every other worker's.

Each test skips, saying why, when its tool is absent (.ci/run installs them when it
can: `apt-get install chromium prometheus`, and playwright from the dev extra).
The monitor and Prometheus are stopped by PID in the fixtures' teardown.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_page_prometheus.py -s
    STRAGGLERLAB_CHROMIUM=/path/to/chrome STRAGGLERLAB_PROMETHEUS=/path/to/prometheus ...
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
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
from stragglerlab.monitor.state import MonitorState
from stragglerlab.run_folder import RunFolder

pytestmark = pytest.mark.slow

FAULT_FIRST = 3
"""The victim (DP 1, stage 1) is twice as slow from this step on."""
VICTIM = (1, 1)
STEPS = 14
WINDOW = 4
"""--window-steps."""


def _which(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env] if os.access(os.environ[env], os.X_OK) else None
    return next((p for p in map(shutil.which, names) if p), None)


def _text(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _wait(what: str, check, timeout: float, every: float = 0.1):
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


def _drain(stream, into: list[str]) -> None:
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
            threading.Thread(target=_drain, args=(stream, into), daemon=True).start()
        line = _wait("the monitor's 'monitor page:' line",
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
        lines = json.loads(_text(self.url + "api/windows"))["lines"]
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


@pytest.fixture
def live(tmp_path):
    mon = LiveRun(tmp_path / "run")
    yield mon
    mon.stop()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    """Where a test keeps what it shows: $STRAGGLERLAB_ARTIFACTS, else its tmp folder."""
    path = Path(os.environ.get("STRAGGLERLAB_ARTIFACTS") or tmp_path / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- the page in Chromium --------------------------------------------------------------

STATUS = "document.getElementById('status').textContent"
CANVAS_PIXELS = """id => {
  const c = document.getElementById(id), g = c.getContext('2d');
  const d = g.getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++;
  return {drawn: n, all: c.width * c.height, css_width: c.clientWidth};
}"""
HEAT_CELLS = """() => {
  const c = document.getElementById('heat'), G = c._geo, r = c.width / c.clientWidth;
  const g = c.getContext('2d'), out = [];
  for (let p = 0; p < G.pp; p++) for (let d = 0; d < G.dp; d++) {
    const x = Math.round((G.L + (d + 0.5) * G.cw) * r);
    const y = Math.round((G.T + (p + 0.5) * G.ch) * r);
    const [R, Gr, B] = g.getImageData(x, y, 1, 1).data;
    out.push({dp: d, stage: p, score: G.grid[p][d], heat: R - Gr - B});
  }
  return out;
}"""


def _until(page, condition: str, problems: list[str], timeout_s: float = 15) -> None:
    """Wait for a JS condition on the page; on timeout, fail with what the page shows."""
    try:
        page.wait_for_function(condition, timeout=timeout_s * 1000)
    except Exception as e:  # playwright's TimeoutError
        pytest.fail(f"{condition} not met in {timeout_s:.0f} s ({type(e).__name__}); status: "
                    f"{page.evaluate(STATUS)!r}; problems: {problems}")


@contextlib.contextmanager
def _chromium_page(sync_playwright, chromium: str, problems: list[str]):
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


def _browser_or_skip():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    chromium = _which("STRAGGLERLAB_CHROMIUM", "chromium", "chromium-browser", "google-chrome")
    if chromium is None:
        pytest.skip("no Chromium: none on PATH, and $STRAGGLERLAB_CHROMIUM unset or not "
                    "executable (apt-get install chromium)")
    return sync_playwright, chromium


@pytest.fixture
def browser_tools():
    """(playwright's sync_playwright, the Chromium binary); a skip when either is absent."""
    return _browser_or_skip()


def test_the_page_in_headless_chromium_follows_the_run(browser_tools, live, artifacts):
    sync_playwright, chromium = browser_tools  # before `live`: a skip costs nothing
    live.grow(FAULT_FIRST + 3)
    _wait("the first windows", lambda: live.last_step() == live.written, 30)
    first = live.written
    problems: list[str] = []
    with _chromium_page(sync_playwright, chromium, problems) as page:
        page.goto(live.url, wait_until="load")
        assert page.title() == "stragglerlab monitor"
        _until(page, f"{STATUS}.includes('last step: {first}')", problems, 15)
        assert "live" in page.evaluate(STATUS)
        page.evaluate("window.__notReloaded = true")  # gone if the page reloads

        # It follows the run as it grows: every new step shows, with no reload.
        shown = [page.evaluate(STATUS)]
        for step in range(live.written + 1, STEPS - 2):
            live.grow(step)
            _until(page, f"{STATUS}.includes('last step: {step}')", problems, 15)
            shown.append(page.evaluate(STATUS))
        assert page.evaluate("window.__notReloaded === true"), "the page reloaded"
        assert len(set(shown)) == len(shown), shown  # step (and S) changed each time
        last = live.written

        # The finding names the victim; the heatmap is drawn, the victim's cell hottest.
        findings = page.inner_text("#findings")
        assert "slow-worker" in findings and "DP 1, stage 1" in findings, findings
        heat = page.evaluate(CANVAS_PIXELS, "heat")
        assert heat["css_width"] > 200 and heat["drawn"] > heat["all"] // 4, heat
        chart = page.evaluate(CANVAS_PIXELS, "chart")
        assert chart["drawn"] > 0, chart
        cells = page.evaluate(HEAT_CELLS)
        hottest = max(cells, key=lambda c: c["heat"])
        assert (hottest["dp"], hottest["stage"]) == VICTIM, cells
        assert "DP 1 / stage 1" in page.inner_text("#top")
        # No part of the page is wider than the window (no horizontal scroll).
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        shot = artifacts / "monitor-page.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"\nscreenshot of the page: {shot}")

        # A reload keeps the state (the history is the server's).
        page.reload(wait_until="load")
        assert not page.evaluate("window.__notReloaded === true")
        _until(page, f"{STATUS}.includes('last step: {last}')", problems, 15)
        assert "DP 1, stage 1" in page.inner_text("#findings")
        # One window per step from step 0: the slider goes back through them all.
        assert page.evaluate("document.getElementById('slider').max") == str(last)
        assert page.evaluate(CANVAS_PIXELS, "heat")["drawn"] > heat["all"] // 4

        # The run ends: the page says so, and the monitor's going away is no error.
        live.grow(STEPS - 1)
        live.end()
        _until(page, f"{STATUS}.includes('run ended')", problems, 30)
        assert live.proc.wait(timeout=30) == 0, live.stop()[-3000:]
        page.wait_for_timeout(2500)  # an EventSource retry would fail within this
        assert "reconnecting" not in page.evaluate(STATUS), page.evaluate(STATUS)
        truth = page.inner_text("#truthbody")  # the ground truth, which the end wrote
        assert "slow-worker" in truth and "DP 1, stage 1" in truth, truth
        page.screenshot(path=str(artifacts / "monitor-page-ended.png"), full_page=True)
    assert problems == [], problems
    assert "Traceback" not in live.stop()


def _big_history(dp: int, pp: int, victim: tuple[int, int], steps: int) -> MonitorState:
    """A made-up history of `steps` windows of a DP x PP job, `victim` slow in each."""
    state = MonitorState("results/made-up-1024-workers/0")
    for step in range(steps):
        grid = [[1.0 + 0.04 * ((d * 7 + p * 3 + step) % 5) / 4 for d in range(dp)]
                for p in range(pp)]
        grid[victim[1]][victim[0]] = 1.6
        rank = victim[1] * dp + victim[0]
        state.add({"kind": "window", "step": step, "steps": list(range(max(0, step - 7),
                   step + 1)), "dp_size": dp, "pp_size": pp, "slowdown": 1.3,
                   "worker_slowdown": grid, "optype_slowdown": {"forward-compute": 1.3},
                   "findings": [{"detector": "whatif", "cause": "slow-worker", "ranks": [
                       {"rank": rank, "dp_rank": victim[0], "stage": victim[1]}],
                       "n_ranks": 1, "first_step": 0, "last_step": step,
                       "estimated_slowdown": 1.3}],
                   "lag_s": 0.1, "lag_from_step_end_s": None, "time": time.time()})
    return state


def test_the_page_stays_readable_at_1024_workers(browser_tools, tmp_path, artifacts):
    """A made-up 128 x 8 history served as the monitor serves it: the heatmap fits the
    window, the victim's cell is the hottest and hovering it names the worker."""
    sync_playwright, chromium = browser_tools
    pytest.importorskip("uvicorn", reason="the page needs the [monitor] extra")
    from stragglerlab.monitor.server import MonitorServer

    victim = (77, 5)
    server = MonitorServer(_big_history(128, 8, victim, 20), tmp_path, "127.0.0.1", 0)
    server.start()
    problems: list[str] = []
    try:
        with _chromium_page(sync_playwright, chromium, problems) as page:
            page.goto(server.url, wait_until="load")
            _until(page, f"{STATUS}.includes('last step: 19')", problems, 15)
            assert "DP 128 x PP 8" in page.evaluate(STATUS)
            assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
            cells = page.evaluate(HEAT_CELLS)
            assert len(cells) == 1024
            hottest = max(cells, key=lambda c: c["heat"])
            assert (hottest["dp"], hottest["stage"]) == victim, hottest
            # Hovering the victim's cell names it.
            box = page.locator("#heat").bounding_box()
            geo = page.evaluate("(({L, T, cw, ch}) => ({L, T, cw, ch}))"
                                "(document.getElementById('heat')._geo)")
            assert geo["cw"] >= 4, geo  # a cell is still a few pixels wide
            page.mouse.move(box["x"] + geo["L"] + (victim[0] + 0.5) * geo["cw"],
                            box["y"] + geo["T"] + (victim[1] + 0.5) * geo["ch"])
            tip = page.inner_text("#tip")
            assert tip.startswith(f"rank {5 * 128 + 77}: DP 77, stage 5: 1.600"), tip
            shot = artifacts / "monitor-page-1024-workers.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"\nscreenshot of the page at 1,024 workers: {shot}")
    finally:
        server.stop()
    assert problems == [], problems


# -- Prometheus ------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path):
    """A factory: start(target host:port) -> the started server's base URL; stopped by
    PID at teardown."""
    binary = _which("STRAGGLERLAB_PROMETHEUS", "prometheus")
    if binary is None:
        pytest.skip("no prometheus: none on PATH, and $STRAGGLERLAB_PROMETHEUS unset or not "
                    "executable (apt-get install prometheus)")
    procs: list[subprocess.Popen] = []

    def start(target: str) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: stragglerlab\n"
            "    scrape_interval: 1s\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n")
        port = _free_port()
        log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}/"
        _wait("Prometheus to be ready", lambda: proc.poll() is None and _text(
            url + "-/ready").strip(), 30, 0.2)
        return url

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(f"\nPrometheus log: {tmp_path / 'prometheus.log'}")


def _query(url: str, promql: str) -> list[dict]:
    data = json.loads(_text(url + "api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_a_real_prometheus_scrapes_the_victims_series(prometheus, live):
    prom = prometheus(live.hostport)
    _wait("Prometheus's first scrape of the monitor (up == 1)", lambda: [
        r for r in _query(prom, 'up{job="stragglerlab"}') if r["value"][1] == "1"], 30, 0.5)
    live.grow(FAULT_FIRST + WINDOW)
    _wait("the monitor to analyse the steps", lambda: live.last_step() == live.written, 30)

    def victim_on_top():
        rows = _query(prom, 'stragglerlab_worker_slowdown{job="stragglerlab"}')
        by = {(int(r["metric"]["dp_rank"]), int(r["metric"]["stage"])): float(r["value"][1])
              for r in rows}
        last = _query(prom, 'stragglerlab_last_step{job="stragglerlab"}')
        if len(by) == 4 and last and float(last[0]["value"][1]) == live.written:
            return by
        return None

    by = _wait("Prometheus to hold the latest window's worker series", victim_on_top, 30, 0.5)
    others = {k: v for k, v in by.items() if k != VICTIM}
    assert by[VICTIM] > 1.2 and by[VICTIM] > max(others.values()), by
    found = _query(prom, 'stragglerlab_findings{job="stragglerlab",cause="slow-worker"}')
    assert found and float(found[0]["value"][1]) >= 1, found
    # The README's Grafana panel queries, as written there.
    job = _query(prom, 'stragglerlab_job_slowdown{job="stragglerlab"}')
    assert job and float(job[0]["value"][1]) > 1.2, job
    panel = _query(prom, 'max by (dp_rank, stage) '
                         '(stragglerlab_worker_slowdown{job="stragglerlab"}) > 1.1')
    assert [(r["metric"]["dp_rank"], r["metric"]["stage"]) for r in panel] == [("1", "1")], panel
    print(f"\nPrometheus: worker slowdown {by}")
    assert "Traceback" not in live.stop()
