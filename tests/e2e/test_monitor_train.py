"""`train --monitor` on a real training run (slow tier): the live monitor names a slow worker.

A DP 2 x PP 2 job on Ray with one slow worker (DP 1, the last stage) from step
FIRST to LAST, and `stragglerlab monitor` beside it (`train --monitor`, a
4-step window, a webhook receiver in the test). The monitor must name the victim
within 3 complete steps after the fault's first step (windows.jsonl, and the
alert's payload), the webhook must get one `finding-appeared` alert, the
finding must clear after the fault window, and a clean run must raise no alert.

    .venv/bin/python -m pytest -m slow tests/e2e/test_monitor_train.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from stragglerlab.monitor.history import read_lines

pytestmark = pytest.mark.slow

FIRST, LAST, STEPS = 7, 12, 22
"""The fault's first and last step, and the run's length (the default 3 warm-up steps, as
the noise floor was measured)."""
CONFIG = f"""
scenarios:
  monitor-e2e-slow:
    description: "e2e of the live monitor: one slow worker (DP 1, PP 1) over steps {FIRST}-{LAST}."
    parallel: {{dp: 2, pp: 2}}
    run: {{steps: {STEPS}, pace_compute: true}}
    faults:
      - {{kind: slow-worker, targets: [{{dp_rank: 1, stage: 1}}], first_step: {FIRST},
          last_step: {LAST}, params: {{factor: 2.0}}}}
  monitor-e2e-clean:
    description: "e2e of the live monitor: the same job, clean."
    parallel: {{dp: 2, pp: 2}}
    run: {{steps: 12, pace_compute: true}}
"""
WINDOW = 6
"""--window-steps: the fault leaves the window at LAST + WINDOW, clears 2 windows later."""


def _scrape(url: str, stop: threading.Event, seen: list[dict]) -> None:
    """Poll /metrics while the run goes: (last step, slow-worker findings, worst worker)."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url + "metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            text = ""
        step = re.search(r"^stragglerlab_last_step (\S+)$", text, re.M)
        found = re.search(r'^stragglerlab_findings\{cause="slow-worker"\} (\S+)$', text, re.M)
        workers = re.findall(r'^stragglerlab_worker_slowdown\{dp_rank="(\d+)",stage="(\d+)"\} '
                             r"(\S+)$", text, re.M)
        if step and found and workers:
            worst = max(workers, key=lambda w: float(w[2]))
            seen.append({"step": int(float(step[1])), "slow_worker": float(found[1]),
                         "worst": (int(worst[0]), int(worst[1]))})
        stop.wait(0.3)


def _train(tmp_path: Path, scenario: str, hook: str) -> tuple[Path, list[dict]]:
    """Train with --monitor; the run folder and what /metrics said while it ran."""
    config = tmp_path / "scenarios.yaml"
    config.write_text(CONFIG)
    out = tmp_path / scenario
    proc = subprocess.Popen(
        [sys.executable, "-m", "stragglerlab", "train", "--scenario", scenario, "--config",
         str(config), "--out", str(out), "--monitor", "--monitor-args",
         f"--window-steps {WINDOW} --port 0 --webhook {hook}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop, seen, err = threading.Event(), [], []
    scraper = None
    try:
        for line in proc.stderr:  # until train exits
            err.append(line)
            if "monitor page: http://127.0.0.1:" in line and scraper is None:
                url = line.split("monitor page: ")[1].split()[0]
                scraper = threading.Thread(target=_scrape, args=(url, stop, seen), daemon=True)
                scraper.start()
        proc.wait(timeout=540)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(err)[-4000:]
    assert scraper is not None, "".join(err)[-4000:]
    return out, seen


def test_train_monitor_names_the_slow_worker_alerts_once_and_clears(tmp_path, webhook):
    url, received = webhook
    out, scraped = _train(tmp_path, "monitor-e2e-slow", url)
    windows = [w for w in read_lines(out / "monitor" / "windows.jsonl")
               if w["kind"] == "window"]
    assert [w["step"] for w in windows] == list(range(3, STEPS))  # one per complete step
    named = [w["step"] for w in windows if any(
        f["cause"] == "slow-worker" and [(r["dp_rank"], r["stage"]) for r in f["ranks"]]
        == [(1, 1)] for f in w["findings"])]
    assert named and FIRST <= named[0] <= FIRST + 2, named
    # /metrics, scraped while the job ran, named it as soon as it was known: the first
    # scrape at or after the step the windows named it does. (Not "a scrape of that very
    # step": a monitor that fell behind on a busy host writes several windows within a
    # second, between two polls; seen on CI, steps 9-17 in 3 s.)
    after = [m for m in scraped if m["step"] >= named[0]]
    assert after and after[0]["step"] <= LAST, scraped[-5:]
    assert after[0]["slow_worker"] >= 1 and after[0]["worst"] == (1, 1), after[:3]
    def victim(a: dict) -> bool:
        return a["finding"]["cause"] == "slow-worker" and [
            (r["dp_rank"], r["stage"]) for r in a["finding"]["ranks"]] == [(1, 1)]

    # While the fault lasts and until it has left the window: one alert names the victim
    # when it appears, and the finding clears once the
    # fault's steps left the window. (After that, this loaded host's noise may name
    # workers again; measured: 1 of 3 runs re-named the victim at the last
    # step, 21, and net-throttle on (1, 0) at steps 16 and 21. Printed, not asserted.)
    horizon = LAST + WINDOW + 2
    early = [(a["event"], a["step"], a["finding"]["cause"]) for a in received
             if a["step"] < FIRST]  # the online GC rule on real GC pauses; see the xfail below
    print(f"alerts before the fault (host noise): {early}")
    assert [a["event"] for a in received if victim(a) and a["step"] <= horizon] == [
        "finding-appeared", "finding-cleared"], received
    cleared = next(a for a in received if victim(a) and a["event"] == "finding-cleared")
    assert LAST < cleared["step"] <= horizon, cleared
    others = [(a["event"], a["step"], a["finding"]["cause"]) for a in received
              if not victim(a) or a["step"] > horizon]
    print(f"alerts besides the victim's appear/clear (host noise): {others}")
    lags = [w["lag_from_step_end_s"] for w in windows if w["lag_from_step_end_s"] is not None]
    assert lags, "the trace clock is this host's: the lag from a step's end is known"
    print(f"analysis lag from step end (s): median {sorted(lags)[len(lags) // 2]:.3f}, "
          f"max {max(lags):.3f} over {len(lags)} windows")


def test_train_monitor_on_a_clean_run_raises_no_alert(tmp_path, webhook):
    # The false-alert rate is measured where it can be, over many runs
    # (benchmarks/monitor_window_replay.py, benchmarks/README.md): under the shipped floor,
    # read at both workload sizes, 0 of 44 held-out clean runs of this job replayed and 0 of
    # 23 fresh monitored ones (5 of 44 under a floor read at 1024-token microbatches only).
    # One run here is a check, not that measurement: a second clean run is trained only when
    # the first alerted, and both must alert to fail, so host noise that crosses the floor
    # once in dozens of runs does not fail CI, while a monitor that alerts on clean runs as a
    # rule does.
    url, received = webhook
    for attempt in (1, 2):
        received.clear()
        (here := tmp_path / f"try-{attempt}").mkdir()
        out, _ = _train(here, "monitor-e2e-clean", url)
        assert [w["step"] for w in read_lines(out / "monitor" / "windows.jsonl")
                if w["kind"] == "window"] == list(range(3, 12))
        if not received:
            return
        print(f"clean run {attempt} alerted (host noise?): "
              f"{[(a['event'], a['step'], a['finding']['cause']) for a in received]}")
    assert received == []
