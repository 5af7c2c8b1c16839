"""One monitor over three live runs (issue 61, slow tier): one page, one scrape, one alerting job.

No training: three `synth` traces (DP 2 x PP 2; the second with worker DP 1 / stage 1
twice as slow from step FAULT_FIRST on, the other two clean, other seeds) are written
into three run folders' trace parts step by step, as the ranks' tracers would write
them (PartsFeeder, as tests/e2e/monitor_live.py does for one run), and one
`stragglerlab monitor --runs A B C --webhook URL` watches them on 127.0.0.1, any free
port. Checked:

- the overview page in headless Chromium (the distribution's, via Playwright) lists
  the three jobs, the faulty one first with its finding naming the victim, the two
  clean ones with none; its link opens the faulty job's own page, which names the
  victim; no console or page error;
- one real Prometheus server scrapes the one target: every job's series are there,
  labelled `job_name` (beside Prometheus's own `job`), from the same scrape, and only
  the faulty job has a `slow-worker` finding;
- the webhook receives alerts of the faulty job only, each naming it;
- the runs end: the monitor stops by itself, exit 0, no traceback.

Skips, saying why, when Chromium, Playwright or Prometheus is absent.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_jobs.py -s
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stragglerlab.cli import main
from stragglerlab.monitor.feed import PartsFeeder
from stragglerlab.run.run_folder import RunFolder
from tests.e2e.monitor_live import (
    FAULT_FIRST,
    STEPS,
    VICTIM,
    WINDOW,
    browser_or_skip,
    chromium_page,
    drain,
    query,
    text,
    wait_for,
)

pytestmark = pytest.mark.slow

JOBS = {"clean-a": None, "slow-b": f"{VICTIM[0]},{VICTIM[1]},2.0,{FAULT_FIRST}",
        "clean-c": None}
"""Job -> its synth --slow (None: a clean run)."""
FAULTY = "slow-b-0"
"""The faulty job's job_name (its run folder: results/slow-b/0)."""


class Hooks:
    """A webhook receiver on 127.0.0.1: every POSTed JSON payload, in order."""

    def __init__(self) -> None:
        self.payloads: list[dict] = []
        got = self.payloads

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server hook's name
                got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ThreeRuns:
    """Three run folders that grow a step at a time, and one monitor over them."""

    def __init__(self, root: Path, hook: str) -> None:
        self.feeders: dict[str, PartsFeeder] = {}
        for seed, (name, slow) in enumerate(JOBS.items(), start=1):
            src = root / "src" / name
            extra = ["--slow", slow] if slow else []
            assert main(["synth", "--out", str(src), "--dp", "2", "--pp", "2", "--steps",
                         str(STEPS), "--seed", str(seed), "--quiet", *extra]) == 0
            run = root / "results" / name / "0"
            run.mkdir(parents=True)  # as a job's launcher makes it, with its meta.yaml
            shutil.copy(src / "meta.yaml", run / "meta.yaml")
            self.feeders[name] = PartsFeeder(run, RunFolder(path=src).trace())
        self.written = -1
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stragglerlab", "monitor", "--runs",
             *(str(f.run_dir) for f in self.feeders.values()), "--host", "127.0.0.1",
             "--port", "0", "--window-steps", str(WINDOW), "--poll", "0.1",
             "--webhook", hook], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.out: list[str] = []
        for stream, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out)):
            threading.Thread(target=drain, args=(stream, into), daemon=True).start()
        line = wait_for("the monitor's 'monitor page:' line",
                        lambda: next((x for x in self.err if "monitor page: " in x), None)
                        or (self.proc.poll() is not None and pytest.fail(
                            "the monitor exited: " + "".join(self.err)[-3000:])), 60)
        self.url = line.split("monitor page: ")[1].split()[0]
        self.hostport = self.url.split("//")[1].rstrip("/")

    def grow(self, to_step: int) -> None:
        """Every run writes its steps up to `to_step`, the three side by side."""
        for step in range(self.written + 1, to_step + 1):
            for f in self.feeders.values():
                f.write_step(step)
            self.written = step

    def jobs(self) -> list[dict]:
        return json.loads(text(self.url + "api/jobs"))["jobs"]

    def caught_up(self) -> bool:
        rows = self.jobs()
        return len(rows) == 3 and all(r["last_step"] == self.written for r in rows)

    def end(self) -> None:
        for f in self.feeders.values():
            src = Path(str(f.run_dir).replace("/results/", "/src/")).parent
            shutil.copy(src / "faults.json", f.run_dir / "faults.json")
            (f.run_dir / "run.json").write_text("{}")

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
def artifacts(tmp_path) -> Path:
    """Where the test keeps its screenshots: $STRAGGLERLAB_ARTIFACTS, else its tmp folder."""
    path = Path(os.environ.get("STRAGGLERLAB_ARTIFACTS") or tmp_path / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_one_monitor_over_three_runs_one_page_one_scrape_one_alerting_job(
        tmp_path, prometheus, artifacts):
    sync_playwright, chromium = browser_or_skip()  # skips before anything starts
    hooks = Hooks()
    runs = ThreeRuns(tmp_path, hooks.url)
    try:
        prom = prometheus(runs.hostport)
        wait_for("Prometheus's first scrape of the monitor (up == 1)", lambda: [
            r for r in query(prom, 'up{job="stragglerlab"}') if r["value"][1] == "1"], 30, 0.5)
        runs.grow(FAULT_FIRST + WINDOW)
        wait_for("the monitor to analyse every job's steps", runs.caught_up, 60)

        # One page: the three jobs, the faulty one first, linking to its own page.
        problems: list[str] = []
        with chromium_page(sync_playwright, chromium, problems) as page:
            page.goto(runs.url, wait_until="load")
            assert page.title() == "stragglerlab monitor: jobs"
            page.wait_for_function(
                "document.querySelectorAll('#jobs tr').length === 3", timeout=15000)
            rows = page.eval_on_selector_all(
                "#jobs tr", "trs => trs.map(t => [t.dataset.job, t.innerText])")
            assert [r[0] for r in rows] == [FAULTY, "clean-a-0", "clean-c-0"] or \
                [r[0] for r in rows] == [FAULTY, "clean-c-0", "clean-a-0"], rows
            assert "slow-worker" in rows[0][1] and "DP 1, stage 1" in rows[0][1], rows
            assert all("none" in r[1] and "slow-worker" not in r[1] for r in rows[1:]), rows
            assert "1 with findings" in page.inner_text("#status")
            assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
            shot = artifacts / "monitor-jobs.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"\nscreenshot of the overview: {shot}")
            page.click(f"a[href='jobs/{FAULTY}/']")
            page.wait_for_url(f"**/jobs/{FAULTY}/")
            page.wait_for_function("document.getElementById('status').textContent"
                                   f".includes('last step: {runs.written}')", timeout=15000)
            assert "DP 1, stage 1" in page.inner_text("#findings")
            assert page.is_visible("#alljobs")  # and back to the overview
            page.screenshot(path=str(artifacts / "monitor-jobs-faulty.png"), full_page=True)
        assert problems == [], problems

        # One scrape: every job's series, labelled job_name, one alerting.
        def all_three():
            rows = query(prom, 'stragglerlab_last_step{job="stragglerlab"}')
            if len(rows) == 3 and all(float(r["value"][1]) == runs.written for r in rows):
                return rows
            return None

        rows = wait_for("Prometheus to hold every job's latest window", all_three, 30, 0.5)
        assert {r["metric"]["job_name"] for r in rows} == {"clean-a-0", FAULTY, "clean-c-0"}
        assert {r["metric"]["instance"] for r in rows} == {runs.hostport}  # one target
        stamps = query(prom, 'timestamp(stragglerlab_last_step{job="stragglerlab"})')
        assert len({r["value"][1] for r in stamps}) == 1, stamps  # from one scrape
        found = query(prom, 'stragglerlab_findings{cause="slow-worker"} > 0')
        assert [r["metric"]["job_name"] for r in found] == [FAULTY], found
        panel = query(prom, 'max by (job_name, dp_rank, stage) '
                            '(stragglerlab_worker_slowdown) > 1.2')
        assert [(r["metric"]["job_name"], r["metric"]["dp_rank"], r["metric"]["stage"])
                for r in panel] == [(FAULTY, "1", "1")], panel
        s = {r["metric"]["job_name"]: float(r["value"][1])
             for r in query(prom, "stragglerlab_job_slowdown")}
        print(f"\nPrometheus: S by job {s}")

        # Only the faulty job alerts, and its alerts name it.
        wait_for("the faulty job's alert", lambda: hooks.payloads, 30)
        runs.grow(STEPS - 1)
        wait_for("the monitor to analyse the last steps", runs.caught_up, 60)
        runs.end()
        assert runs.proc.wait(timeout=60) == 0, runs.stop()[-3000:]
        assert hooks.payloads and {p["job_name"] for p in hooks.payloads} == {FAULTY}, \
            hooks.payloads
        assert hooks.payloads[0]["event"] == "finding-appeared"
        assert hooks.payloads[0]["run"].endswith("slow-b/0")
        out = "".join(runs.out)
        assert out.startswith("monitor of 3 job(s)") and FAULTY in out.splitlines()[1], out
    finally:
        err = runs.stop()
        hooks.close()
    assert "Traceback" not in err, err[-3000:]
