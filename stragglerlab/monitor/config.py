"""The monitor's settings: one kw_only dataclass, filled from `stragglerlab monitor`'s flags.

    cfg = MonitorConfig(run=Path("results/slow-worker-1/0"), window_steps=8)
    cfg.check()          # InputError on a bad value, before anything starts
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.run.run_folder import MONITOR_DIR
from stragglerlab.util.errors import InputError

WINDOWS_JSONL = "windows.jsonl"
"""monitor/windows.jsonl: one analysed window per line (schema WINDOW_SCHEMA)."""
ALERTS_JSONL = "alerts.jsonl"
"""monitor/alerts.jsonl: alerts delivered (or with nowhere to go), one per line."""
ALERTS_FAILED_JSONL = "alerts-failed.jsonl"
"""monitor/alerts-failed.jsonl: alerts whose delivery failed after every retry."""
LOG_FILE = "monitor.log"
"""monitor/monitor.log: the monitor's own log (errors, starts, stops)."""
LOCK_FILE = "monitor.lock"
"""monitor/monitor.lock: held (flock, stragglerlab.util.folder_lock) by the running monitor,
holds its pid and verb."""
WINDOW_SCHEMA = "stragglerlab.monitor-window/1"
"""`schema` of every windows.jsonl line."""
ALERT_SCHEMA = "stragglerlab.monitor-alert/1"
"""`schema` of every alert payload."""


@dataclass(kw_only=True)
class MonitorConfig:
    """What to watch, how to analyse it, where to alert and where to serve."""

    run: Path
    """The run folder watched (read-only except its monitor/ folder)."""
    job_name: str | None = None
    """The job's name in alerts (and, watching several runs, on the overview page and in
    /metrics' `job_name` label); None: made from the run folder's path (jobs.job_name)."""
    window_steps: int = 8
    """K: each analysis covers the last K complete steps."""
    detectors: list[str] = field(default_factory=lambda: ["whatif"])
    """Detectors whose findings each window reports (`stragglerlab list detectors`)."""
    noise_floor: str = "default"
    """The `whatif` detector's noise floor: a file `stragglerlab noise-floor` wrote, `default`
    (the shipped one, for this testbed's runs only) or `none`."""
    warmup_steps: int | None = None
    """Steps left out at the start; None: run.json's scenario when written, else 0."""
    dp: int | None = None
    """DP size when meta.yaml is not written yet; None: meta.yaml, else inferred."""
    pp: int | None = None
    """PP size when meta.yaml is not written yet; None: meta.yaml, else inferred."""
    poll_s: float = 0.5
    """Seconds between two looks at the trace parts."""
    webhook: str | None = None
    """URL alerts are POSTed to (JSON), or None."""
    alert_command: str | None = None
    """Shell command run per alert (payload on stdin, STRAGGLERLAB_ALERT_* env), or None."""
    slowdown_alert: float | None = None
    """Alert when a window's S crosses this (up or down); None: no S alert."""
    clear_after_windows: int = 2
    """A finding clears after this many windows in a row without it (no alert flapping)."""
    alert_retries: int = 3
    """Delivery attempts per alert target before it is kept as failed."""
    alert_backoff_s: float = 0.5
    """First wait between delivery attempts (doubled each retry)."""
    alert_timeout_s: float = 5.0
    """Seconds a webhook POST or alert command may take."""
    host: str = "127.0.0.1"
    """Address the web server binds."""
    port: int = 8765
    """Port the web server binds."""
    allow_remote: bool = False
    """Allow a non-loopback host (the page and metrics have no authentication)."""

    def __post_init__(self) -> None:
        self.run = Path(self.run)

    @property
    def monitor_dir(self) -> Path:
        """RUN/monitor/."""
        return self.run / MONITOR_DIR

    def check(self) -> None:
        """InputError for a value the monitor cannot work with."""
        if self.window_steps < 1:
            raise InputError(f"--window-steps {self.window_steps}: must be >= 1 (e.g. 8)")
        if not self.detectors:
            raise InputError("--detectors: name at least one detector, e.g. whatif")
        for name, v in (("--dp", self.dp), ("--pp", self.pp)):
            if v is not None and v < 1:
                raise InputError(f"{name} {v}: must be >= 1")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise InputError(f"--warmup-steps {self.warmup_steps}: must be >= 0")
        if self.slowdown_alert is not None and not 1.0 < self.slowdown_alert <= \
                MAX_SLOWDOWN_ALERT:  # also NaN and inf: an alert that can never fire
            raise InputError(f"--slowdown-alert {self.slowdown_alert}: S is >= 1, so give a "
                             f"threshold above 1 and at most {MAX_SLOWDOWN_ALERT:g}, e.g. 1.2")
        if self.webhook is not None:
            check_webhook(self.webhook)
        if not 0 < self.poll_s <= MAX_POLL_S:  # also NaN; inf would overflow the wait
            raise InputError(f"--poll {self.poll_s}: give seconds between looks, above 0 and "
                             f"at most {MAX_POLL_S:g} (e.g. 0.5)")
        for name, v in (("alert backoff", self.alert_backoff_s),
                        ("alert timeout", self.alert_timeout_s)):
            if not 0 <= v <= MAX_POLL_S:
                raise InputError(f"{name} {v} s: must be from 0 to {MAX_POLL_S:g} s")
        if not 0 <= self.port <= 65535:
            raise InputError(f"--port {self.port}: must be in 0..65535")
        if self.clear_after_windows < 1:
            raise InputError(f"clear_after_windows {self.clear_after_windows}: must be >= 1")
        if self.alert_retries < 1:
            raise InputError(f"alert retries {self.alert_retries}: must be >= 1")
        check_host(self.host, self.allow_remote)


MAX_POLL_S = 3600.0
"""Longest wait between two looks at the trace parts (and alert timeouts, backoffs)."""
MIN_POLL_S = 0.05
"""Shortest wait between two looks: a shorter --poll waits this long (the ranks append a
step at a time, so looking more often only burns the job's CPU)."""
MAX_SLOWDOWN_ALERT = 1000.0
"""Highest --slowdown-alert: a job 1000x its ideal step time is hung long before a window
reaches it, so a higher threshold is an alert that never fires."""


def check_webhook(url: str) -> None:
    """InputError unless `url` is an http(s) URL with a host (and a valid port, if any)."""
    from urllib.parse import urlsplit

    fix = "give an http:// or https:// URL with a host, e.g. http://127.0.0.1:9000/hook"
    if not url.startswith(("http://", "https://")):
        raise InputError(f"--webhook {url!r}: {fix}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not 0..65535
    except ValueError as e:
        raise InputError(f"--webhook {url!r}: {e}; {fix}") from None
    if not parts.hostname:
        raise InputError(f"--webhook {url!r}: no host; {fix}")


def is_loopback(host: str) -> bool:
    """Whether `host` names the loopback interface only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_remote: bool) -> bool:
    """True when `host` is non-loopback and allowed; InputError when it is not allowed."""
    if is_loopback(host):
        return False
    if not allow_remote:
        raise InputError(f"--host {host}: not a loopback address; the page, its data and "
                         "/metrics have no authentication, so binding another interface "
                         "needs --allow-remote (or keep the default 127.0.0.1 and tunnel, "
                         "e.g. ssh -L 8765:127.0.0.1:8765)")
    return True
