"""step-changepoint: online change-point detection on the job's step time (Falcon/Greyhound style).

Falcon and Greyhound watch the iteration time of a training job and raise a
fail-slow alarm at a change point. This baseline does the same with a one-sided
(upward) CUSUM, written with plain Python arithmetic and O(1) state per step:

* baseline mu: median of the first `warmup_steps` step times, then the running
  mean of every later step that is in control (CUSUM statistic back at 0), so a
  slow drift is absorbed instead of accumulated;
* per step: r = step_time / mu - 1 (relative excess), S = max(0, S + min(r - k,
  h / 2)); the change starts at the step after S was last 0; the alarm fires
  when S >= h. The per-step cap h/2 means one outlier step (a checkpoint, a GC
  storm) cannot raise an alarm alone: two consecutive slow steps can.

The step time is the latest optimizer end minus the step's earliest start (over
all ranks). A finding is job-level (ranks = [], the method cannot tell who),
root cause `slow-worker`, first_step = the estimated change step, estimated_slowdown
= mean step time since the change / baseline mean. One (the first upward)
change per run. A slowdown present from the first step has no change point and
is not seen; neither are failed runs (hang/crash), which return [].

    python -c "from analysis.detectors import get_detector, load_run; \
print([f.to_dict() for f in get_detector('step-changepoint').detect_online(load_run('RUN_DIR'))])"
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import pandas as pd

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run, TraceNeed
from stragglerlab.analysis.detectors.baseline_common import step_times
from stragglerlab.analysis.detectors.config_ranges import in_range
from stragglerlab.trace.meta import JobMeta


@dataclass(frozen=True, kw_only=True)
class StepChangepointConfig:
    """Parameters of the upward CUSUM on relative step time."""

    warmup_steps: int = 5
    """Steps that set the baseline (median) before any test."""
    min_shift: float = 0.3
    """Smallest relative step-time increase the test is tuned for (0.3 = 30% slower).
    The reference value k is half of it, the textbook CUSUM choice (k = delta / 2)."""
    threshold: float = 0.6
    """Alarm level h of the CUSUM statistic, in relative-excess units (2 x min_shift: a
    sustained min_shift jump alarms after 4 steps, a 2x jump after 2). Assumes step-time
    noise of at most ~10% (our clean runs: 5-7%)."""

    def __post_init__(self) -> None:
        in_range(self, "warmup_steps", 1,
                 why="the baseline is the median of the warm-up steps (with none it is never "
                     "set and no change is ever seen)")


@dataclass
class _CusumState:
    """O(1) online state of the detector."""

    warm: list[float]
    """Step times of the warm-up (at most warmup_steps values), s."""
    base_sum: float = 0.0
    """Sum of the in-control step times the baseline averages, s."""
    base_n: int = 0
    """How many step times base_sum holds."""
    s: float = 0.0
    """CUSUM statistic, relative-excess units."""
    s_peak: float = 0.0
    """Largest S seen since the change started."""
    start_step: int | None = None
    """Estimated change step (first step of the current excursion)."""
    post_sum: float = 0.0
    """Sum of step times since start_step, s."""
    post_n: int = 0
    """How many step times post_sum holds."""
    alarm_step: int | None = None
    """Step at which S first reached the threshold; None before the alarm."""
    alarm_mu: float = 0.0
    """Baseline mean at the alarm, s (frozen from then on)."""
    last_step: int = -1
    """Last step observed."""

    @property
    def mu(self) -> float:
        """Current baseline mean step time, s."""
        return self.alarm_mu if self.alarm_step is not None else self.base_sum / self.base_n


class StepChangepointDetector(Detector):
    """Upward CUSUM on step time; job-level finding from the detected change step."""

    name = "step-changepoint"
    description = "Falcon/Greyhound-style online change point (CUSUM) on job step time"
    needs = TraceNeed.STEP_TIMES

    def __init__(self, config: StepChangepointConfig | None = None) -> None:
        self.config = config or StepChangepointConfig()
        self._state = _CusumState(warm=[])

    # -- online ----------------------------------------------------------------------------

    def reset(self, meta: JobMeta) -> None:
        """Forget everything: a new run starts."""
        self._meta = meta
        self._state = _CusumState(warm=[])

    def observe_step(self, step_trace: pd.DataFrame, run: Run) -> list[Finding]:
        """Feed one step's ops; O(1) work beyond computing that step's time."""
        if run.outcome == "failed" or step_trace.empty:
            return []
        times = step_times(step_trace)
        for step, t in times.items():
            self._update(int(step), float(t))
        return self._findings()

    def _update(self, step: int, t: float) -> None:
        cfg, st = self.config, self._state
        st.last_step = step
        if st.base_n == 0:
            st.warm.append(t)
            if len(st.warm) == cfg.warmup_steps:
                # Median: a first step that includes warm-up work must not set the level.
                st.base_sum, st.base_n = statistics.median(st.warm) * len(st.warm), len(st.warm)
            return
        if st.alarm_step is not None:
            st.post_sum, st.post_n = st.post_sum + t, st.post_n + 1
            st.s = max(0.0, st.s + min(t / st.mu - 1.0 - cfg.min_shift / 2, cfg.threshold / 2))
            st.s_peak = max(st.s_peak, st.s)
            return
        inc = min(t / st.mu - 1.0 - cfg.min_shift / 2, cfg.threshold / 2)
        if st.s == 0.0 and inc > 0.0:
            st.start_step, st.post_sum, st.post_n, st.s_peak = step, 0.0, 0, 0.0
        st.s = max(0.0, st.s + inc)
        if st.s > 0.0:
            st.post_sum, st.post_n = st.post_sum + t, st.post_n + 1
            st.s_peak = max(st.s_peak, st.s)
            if st.s >= cfg.threshold:
                st.alarm_step, st.alarm_mu = step, st.base_sum / st.base_n
        else:
            st.base_sum, st.base_n = st.base_sum + t, st.base_n + 1
            st.start_step = None

    def _findings(self) -> list[Finding]:
        st, cfg = self._state, self.config
        if st.alarm_step is None or st.start_step is None:
            return []
        post = st.post_sum / st.post_n
        if post / st.mu < 1.0 + cfg.min_shift:
            # CUSUM says the level moved; report only a move as large as the test is
            # tuned for (a loaded host drifts by 10-20% without any fault).
            return []
        return [Finding(
            ranks=[], first_step=st.start_step, last_step=st.last_step,
            root_cause=RootCause.SLOW_WORKER,
            # 0.5 at the alarm level, -> 1 as the evidence S keeps growing.
            confidence=float(1.0 - 0.5 * cfg.threshold / max(st.s_peak, cfg.threshold)),
            estimated_slowdown=float(post / st.mu),
            detail={
                "change_step": int(st.start_step), "alarm_step": int(st.alarm_step),
                "baseline_step_time_s": round(st.mu, 6),
                "post_change_step_time_s": round(post, 6),
                "cusum_peak": round(st.s_peak, 4),
                "config": asdict(cfg),
            },
        )]

    # -- offline ---------------------------------------------------------------------------

    def detect(self, run: Run) -> list[Finding]:
        """The same recurrence over the whole run's step times (one value per step)."""
        self.reset(run.meta)
        if run.outcome == "failed" or run.trace.empty:
            return []
        for step, t in step_times(run.trace).items():
            self._update(int(step), float(t))
        return self._findings()
