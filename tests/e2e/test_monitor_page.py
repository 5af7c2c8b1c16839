"""The live monitor's page in a real headless browser (issue 32, slow tier); its /metrics
scraped by a real Prometheus server: test_monitor_prometheus.py.

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

Each test skips, saying why, when its tool is absent (.ci/run installs them when it
can: `apt-get install chromium`, and playwright from the dev extra).
The monitor is stopped by PID in the fixture's teardown.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_page.py -s
    STRAGGLERLAB_CHROMIUM=/path/to/chrome ...
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stragglerlab.monitor.state import MonitorState
from tests.e2e.monitor_live import FAULT_FIRST, STEPS, VICTIM, wait_for
from tests.e2e.monitor_live import browser_or_skip as _browser_or_skip
from tests.e2e.monitor_live import chromium_page as _chromium_page

pytestmark = pytest.mark.slow



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


@pytest.fixture
def browser_tools():
    """(playwright's sync_playwright, the Chromium binary); a skip when either is absent."""
    return _browser_or_skip()


def test_the_page_in_headless_chromium_follows_the_run(browser_tools, live, artifacts):
    sync_playwright, chromium = browser_tools  # before `live`: a skip costs nothing
    live.grow(FAULT_FIRST + 3)
    wait_for("the first windows", lambda: live.last_step() == live.written, 30)
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


def test_the_page_shows_an_unannotated_imports_windows(browser_tools, tmp_path, artifacts):
    """examples/torch-ddp imported without annotations (rank 1 half speed from step 6) and
    replayed by the monitor (monitor/import_replay.py), served as the monitor serves it:
    the page shows every window, the finding naming rank 1, its cell the hottest, and the
    ground truth the import carried."""
    sync_playwright, chromium = browser_tools
    pytest.importorskip("uvicorn", reason="the page needs the [monitor] extra")
    from stragglerlab.cli import main
    from stragglerlab.monitor.config import MonitorConfig
    from stragglerlab.monitor.import_replay import monitor_for
    from stragglerlab.monitor.server import MonitorServer

    ddp = Path(__file__).resolve().parents[2] / "examples" / "torch-ddp"
    run = tmp_path / "imported"
    assert main(["import", "kineto", "--traces", str(ddp / "kineto"), "--faults",
                 str(ddp / "faults.json"), "--out", str(run), "--quiet"]) == 0
    mon = monitor_for(MonitorConfig(run=run))
    assert mon.run(once=True) == 12
    server = MonitorServer(mon.state, run, "127.0.0.1", 0)
    server.start()
    problems: list[str] = []
    try:
        with _chromium_page(sync_playwright, chromium, problems) as page:
            page.goto(server.url, wait_until="load")
            _until(page, f"{STATUS}.includes('last step: 13')", problems, 15)
            status = page.evaluate(STATUS)
            assert "DP 2 x PP 1" in status and "windows: 12" in status, status
            assert "NO VERDICT" not in status, status
            findings = page.inner_text("#findings")
            assert "slow-worker" in findings and "rank 1 (DP 1, stage 0)" in findings
            cells = page.evaluate(HEAT_CELLS)
            assert max(cells, key=lambda c: c["heat"])["dp"] == 1, cells
            assert "compute" in page.inner_text("#optypes")
            _until(page, "document.getElementById('truthbody').textContent"
                         ".includes('slow-worker')", problems, 15)
            shot = artifacts / "monitor-page-import.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"\nscreenshot of an import's page: {shot}")
    finally:
        server.stop()
    assert problems == [], problems
