"""Alerts: a finding appeared or cleared, or the job's S crossed a threshold.

`AlertTracker` turns the sequence of windows into events (a finding clears
after `clear_after_windows` windows in a row without it, so one flicker is no
alert pair); `AlertSender` delivers each on a background thread: POST the JSON
payload to the webhook (urllib) and/or run the alert command (payload on
stdin, `STRAGGLERLAB_ALERT_EVENT` / `_JOB` / `_STEP` / `_SLOWDOWN` in its environment),
each with bounded retries and doubling backoff. Nothing is lost silently: a
delivered alert (or one with no target configured) is appended to
`monitor/alerts.jsonl`, a failed one to `monitor/alerts-failed.jsonl` with the
errors, and logged.

Payload (schema stragglerlab.monitor-alert/1):

    {"schema": "stragglerlab.monitor-alert/1", "id": "...", "event": "finding-appeared",
     "run": "results/x/0", "job_name": "x-0", "step": 14, "window": [7, 14], "job_slowdown": 1.32,
     "threshold": null, "finding": {"detector": "whatif", "cause": "slow-worker",
     "ranks": [{"rank": 3, "dp_rank": 1, "stage": 1}], ...}, "time": 1764100000.0}
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable

from stragglerlab.monitor.config import (
    ALERT_SCHEMA,
    ALERTS_FAILED_JSONL,
    ALERTS_JSONL,
    MonitorConfig,
)
from stragglerlab.monitor.history import append_line
from stragglerlab.monitor.window import finding_key

EVENTS = ("finding-appeared", "finding-cleared", "slowdown-above", "slowdown-below")
"""The alert events."""


class AlertTracker:
    """What changed from one window to the next, as alert payloads."""

    def __init__(self, run: str, threshold: float | None, clear_after: int,
                 job_name: str | None = None) -> None:
        self.run = run
        self.job_name = job_name
        self.threshold = threshold
        self.clear_after = clear_after
        self.active: dict[str, dict] = {}
        self.missing: dict[str, int] = {}
        self.above = False

    def observe(self, window: dict) -> list[dict]:
        """The alerts a new window raises (and the state moved on)."""
        out = []
        seen = {finding_key(f): f for f in window.get("findings") or []}
        for key, f in seen.items():
            self.missing.pop(key, None)
            if key not in self.active:
                out.append(self._payload("finding-appeared", window, f))
            self.active[key] = f
        for key in [k for k in self.active if k not in seen]:
            self.missing[key] = self.missing.get(key, 0) + 1
            if self.missing[key] >= self.clear_after:
                out.append(self._payload("finding-cleared", window, self.active.pop(key)))
                del self.missing[key]
        s = window.get("slowdown")
        if self.threshold is not None and s is not None:
            if s >= self.threshold and not self.above:
                out.append(self._payload("slowdown-above", window, None))
            elif s < self.threshold and self.above:
                out.append(self._payload("slowdown-below", window, None))
            self.above = s >= self.threshold
        return out

    def _payload(self, event: str, window: dict, finding: dict | None) -> dict:
        steps = window.get("steps") or [window.get("step")]
        return {"schema": ALERT_SCHEMA, "id": uuid.uuid4().hex, "event": event,
                "run": self.run, "job_name": self.job_name, "step": window.get("step"),
                "window": [steps[0], steps[-1]],
                "job_slowdown": window.get("slowdown"), "threshold": self.threshold
                if event.startswith("slowdown") else None, "finding": finding,
                "time": round(time.time(), 3)}


def post_json(url: str, payload: dict, timeout: float) -> None:
    """POST payload as JSON; raises on a transport error or a non-2xx answer."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "User-Agent": "stragglerlab-monitor"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the user's URL
        if not 200 <= resp.status < 300:
            raise OSError(f"HTTP {resp.status}")


def run_command(command: str, payload: dict, timeout: float) -> None:
    """Run the alert command with the payload on stdin; raises when it fails."""
    env = dict(os.environ, STRAGGLERLAB_ALERT_EVENT=payload["event"],
               STRAGGLERLAB_ALERT_JOB=str(payload.get("job_name") or ""),
               STRAGGLERLAB_ALERT_STEP=str(payload["step"]),
               STRAGGLERLAB_ALERT_SLOWDOWN=str(payload["job_slowdown"]))
    done = subprocess.run(command, shell=True, input=json.dumps(payload), text=True,  # noqa: S602
                          capture_output=True, timeout=timeout, env=env, check=False)
    if done.returncode:
        raise OSError(f"exit status {done.returncode}: {done.stderr.strip()[-300:]}")


def deliver(attempt: Callable[[], None], retries: int, backoff_s: float) -> tuple[int, str | None]:
    """(attempts made, last error or None) of up to `retries` tries with doubling backoff."""
    error = None
    for i in range(retries):
        try:
            attempt()
            return i + 1, None
        except (OSError, urllib.error.URLError, subprocess.SubprocessError, ValueError) as e:
            error = f"{type(e).__name__}: {e}"
        if i + 1 < retries:
            time.sleep(backoff_s * 2**i)
    return retries, error


class AlertSender:
    """Delivers alerts in the background and keeps every one in monitor/."""

    def __init__(self, cfg: MonitorConfig, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.log = log
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="monitor-alerts", daemon=True)
        self.thread.start()

    def send(self, payload: dict) -> None:
        """Queue one alert."""
        self.queue.put(payload)

    def close(self, timeout: float = 30.0) -> None:
        """Deliver what is queued (at most `timeout` seconds), then stop."""
        self.queue.put(None)
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.log(f"alerts: {self.queue.qsize()} still queued at exit; not delivered")

    def _loop(self) -> None:
        while (payload := self.queue.get()) is not None:
            self.deliver_now(payload)

    def deliver_now(self, payload: dict) -> bool:
        """Deliver one alert to every target; record it; True when all succeeded."""
        cfg, results = self.cfg, {}
        targets = {}
        if cfg.webhook:
            targets["webhook"] = lambda: post_json(cfg.webhook, payload, cfg.alert_timeout_s)
        if cfg.alert_command:
            targets["command"] = lambda: run_command(cfg.alert_command, payload,
                                                     cfg.alert_timeout_s)
        for name, attempt in targets.items():
            results[name] = deliver(attempt, cfg.alert_retries, cfg.alert_backoff_s)
        failed = {k: e for k, (_, e) in results.items() if e}
        record = {"alert": payload, "attempts": {k: n for k, (n, _) in results.items()},
                  "delivered_to": [k for k in targets if k not in failed]}
        where = self.cfg.monitor_dir
        try:
            if failed:
                append_line(where / ALERTS_FAILED_JSONL, dict(record, errors=failed))
                self.log(f"alert {payload['event']} of {payload.get('job_name')} at step "
                         f"{payload['step']}: delivery "
                         f"failed ({'; '.join(f'{k}: {e}' for k, e in failed.items())}); kept "
                         f"in {where / ALERTS_FAILED_JSONL}")
            if not failed or len(failed) < len(targets):
                append_line(where / ALERTS_JSONL, record)
        except OSError as e:
            self.log(f"alert {payload['event']}: cannot be recorded in {where} ({e})")
        return not failed
