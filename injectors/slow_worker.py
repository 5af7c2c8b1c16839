"""Slow worker / slow GPU: the victim's device really gets slower by a factor.

On CPU (isolated ranks) the victim's cgroup CPU quota is cut for the step
window — the CPU analogue of capping a GPU's clock — so its compute takes
`factor` times longer (measured ±10%). Only the compute part of the share is
divided: the rank's other threads (P2P, gloo I/O, Ray) keep the CPU rate
they were measured to use over the previous step; and each step the share
is steered (damped feedback) on the factor actually measured — the victim's
compute time over its DP peers' in the latest steps all flushed to
trace-parts/ (on the torch-wrapper workloads, which have no op trace: their
compute/ logs, stragglerlab/run/compute_log.py) — which lands within ~1% of the
request. Where the engine paces compute to a fixed rate (`run.pace_rate` warmup or
auto, after the warm-up steps), the pacer stretches each of the victim's compute ops
to exactly `factor` times its nominal time (RankContext.device_factor) and its CPU
quota is left as it is, as a slow GPU's host CPU is (the mechanism `paced-rate`).
Without CPU isolation (no root / no cgroup v1) the named fallback
`stretch` sleeps (factor - 1) x the compute's own duration inside each compute
op, an exact in-process stretch; the torch-wrapper workloads, paced per Linear
(workloads/torch_pacing.py), are slowed by their pacer instead (`paced-rate`).
On CUDA ranks the victim's GPU itself is slowed instead (`gpu-sleep`,
injectors/gpu_sleep.py): after each compute op a GPU-side spin of (factor - 1)
x the op's GPU time on the victim's stream. Measured: victim
compute time over the same stages' other workers.

    - kind: slow-worker
      targets: [{dp_rank: 0, stage: 1}]
      params: {factor: 2.0}
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from stragglerlab.host.cgroups import quota_for
from stragglerlab.injectors.base import Injector, RankContext, compute_ratio
from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.scenarios.scenario_vocab import TORCH_WORKLOADS
from stragglerlab.trace.schema import OPTYPE_VALUES, OpType

FEEDBACK_GAIN = 0.6  # < 1: damped, the per-step ratio is noisy
_COMPUTE_CODES = (OPTYPE_VALUES.index(OpType.FORWARD_COMPUTE.value),
                  OPTYPE_VALUES.index(OpType.BACKWARD_COMPUTE.value))
_TICKS = os.sysconf("SC_CLK_TCK")


def _other_threads_cpu_s(compute_tid: int | None) -> float:
    """CPU seconds used by this process's threads other than the compute thread."""
    total = 0.0
    for task in Path("/proc/self/task").iterdir():
        if compute_tid is not None and task.name == str(compute_tid):
            continue
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
    return total


def _paced_to_rate(run: dict) -> bool:
    """Whether the run's engine paced compute to a rate (its scenario as run.json keeps it):
    the pacer, not the quota, then made the victim slow."""
    from stragglerlab.scenarios.scenario import Scenario
    from stragglerlab.util.typed_mapping import build_dataclass

    if "pace_rate" not in (run.get("scenario") or {}).get("run", {}):
        return False  # written before pace_rate existed: paced to CPU time, if at all
    try:
        scenario = build_dataclass(Scenario, run["scenario"], "run.json", "scenario")
    except Exception:  # noqa: BLE001 - an older or partial run.json: not paced to a rate
        return False
    isolated = bool((run.get("isolation") or {}).get("enabled"))
    torch_paced = scenario.workload in TORCH_WORKLOADS and not isolated  # workloads/torch_rank
    return bool(scenario.run.pace_compute and (scenario.paced_to_warmup_rate or torch_paced))


def _peer_compute_ratio(ctx: RankContext, before_step: int, window: int = 2,
                        since: int = 0) -> float | None:
    """This rank's mean compute duration over its same-stage DP peers', over the latest
    `window` steps before `before_step` that all of them flushed; None if unknown.
    since: the fault's first step, honoured on the compute-log path (torch workloads)."""
    if ctx.dp_size < 2 or not ctx.run_dir:
        return None
    from stragglerlab.trace.trace_parts import read_records

    parts = Path(ctx.run_dir) / "trace-parts"
    if not parts.is_dir():  # a torch-wrapper workload: no op trace, its compute log instead
        from stragglerlab.run.compute_log import peer_ratio

        peers = [ctx.stage * ctx.dp_size + d for d in range(ctx.dp_size)]
        # Only steps the fault acted in: a clean step's ratio (~1) would double the cut.
        return peer_ratio(ctx.run_dir, ctx.rank, peers, before_step, window, since)
    per_rank: dict[int, dict[int, float]] = {}
    for d in range(ctx.dp_size):
        rank = ctx.stage * ctx.dp_size + d
        try:
            rec = read_records(parts / f"rank{rank}.bin")
        except OSError:
            return None
        rec = rec[np.isin(rec["optype"], _COMPUTE_CODES) & (rec["step"] < before_step)]
        steps, inverse = np.unique(rec["step"], return_inverse=True)
        totals = np.bincount(inverse, weights=rec["end"] - rec["start"], minlength=len(steps))
        per_rank[rank] = dict(zip(steps.tolist(), totals.tolist()))
    common = sorted(set.intersection(*(set(m) for m in per_rank.values())))[-window:]
    if not common or ctx.rank not in per_rank:
        return None
    mine = sum(per_rank[ctx.rank][s] for s in common)
    peers = [sum(m[s] for s in common) for r, m in per_rank.items() if r != ctx.rank]
    return mine / float(np.mean(peers)) if peers and np.mean(peers) > 0 else None


def _write_quota(cgroup: dict, cores: float) -> None:
    period, quota = quota_for(cores, cgroup["period_us"])
    cpu_dir = Path(cgroup["cpu_dir"])
    # Both stay >= 1 ms whichever is written first; period first keeps the new ratio exact.
    (cpu_dir / "cpu.cfs_period_us").write_text(str(period))
    (cpu_dir / "cpu.cfs_quota_us").write_text(str(quota))
    cgroup["cores_now"] = quota / period  # the engine's compute pacing follows it


class SlowWorker(Injector):
    """Divide the victim's CPU share by `factor` during the window."""

    kind = FaultKind.SLOW_WORKER
    known_params = frozenset({"factor"})

    def check_params(self) -> None:
        self.factor = self.param("factor", lo=1.0, hi=20.0)

    def mechanism(self, ctx: RankContext) -> str:
        """'gpu-sleep' on a CUDA rank, 'cpu-quota' when isolated, else the 'stretch' fallback."""
        if ctx.device.startswith("cuda"):
            return "gpu-sleep"
        return "cpu-quota" if ctx.cgroup else "stretch"

    def on_setup(self, ctx: RankContext) -> None:
        ctx.state["compute_tid"] = threading.get_native_id()  # the training thread
        ctx.state["cpu_mark"] = (_other_threads_cpu_s(ctx.state["compute_tid"]), time.monotonic())

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        want = self.active(step)
        if self.mechanism(ctx) == "gpu-sleep":  # the GPU is the device: leave the CPU alone
            if want and "gpu" not in ctx.state:
                from stragglerlab.injectors.gpu_sleep import GpuStretch

                ctx.state["gpu"] = GpuStretch(self.factor)
            ctx.state["gpu_active"] = want
            return
        # A rank paced to a fixed rate is a device: its ops take exactly `factor` times
        # their nominal time (workloads/pacing.py), and a stretch would vanish into the
        # padding.
        ctx.device_factor = self.factor if want else 1.0
        ctx.state["stretch"] = want and not ctx.cgroup and not ctx.paced_to_rate
        if not ctx.cgroup:
            return
        if ctx.paced_to_rate:
            # The pacer is the device, and the factor its rate: the CPU stays, as a slow
            # GPU's host CPU does. A cut under it starved the op past its nominal time for
            # the steps the steering took (a 2.36x victim ran 3.4-4x).
            if ctx.state.get("slowed", False):
                _write_quota(ctx.cgroup, ctx.cgroup["cores"])
                ctx.state["slowed"] = False
            return
        # The rank's other threads (P2P, gloo I/O, Ray) use a roughly fixed CPU rate `o`
        # from the same quota; dividing the whole share by `factor` would slow the
        # compute thread by more than asked. So the compute part alone is divided:
        # share = o + (share - o) / factor, with `o` measured over the last step.
        tid = ctx.state.get("compute_tid")
        others, now = _other_threads_cpu_s(tid), time.monotonic()
        last_others, last_now = ctx.state.get("cpu_mark", (others, now))
        ctx.state["cpu_mark"] = (others, now)
        if now > last_now:
            ctx.state["overhead_cores"] = min(max((others - last_others) / (now - last_now),
                                                  0.0), 0.5 * ctx.cgroup["cores"])
        if want:
            self._steer(ctx, step)
        if want or ctx.state.get("slowed", False):
            base = ctx.cgroup["cores"]
            o = ctx.state.get("overhead_cores", 0.0)
            trim = ctx.state.get("trim", 1.0)
            share = min(base, o + (base - o) / self.factor * trim)
            _write_quota(ctx.cgroup, share if want else base)
            ctx.state["slowed"] = want

    def _steer(self, ctx: RankContext, step: int) -> None:
        """Feedback on the measured factor: the victim's mean compute time over its DP
        peers' (same stage) in the latest step all of them flushed to trace-parts/,
        i.e. exactly what faults.json reports, nudges the compute share."""
        ratio = _peer_compute_ratio(ctx, before_step=step, since=self.spec.first_step)
        if ratio is None or ratio <= 0:
            return
        trim = ctx.state.get("trim", 1.0) * (ratio / self.factor) ** FEEDBACK_GAIN
        ctx.state["trim"] = min(max(trim, 0.5), 2.0)

    def in_compute(self, ctx: RankContext, step: int) -> None:
        if ctx.state.get("gpu_active"):
            ctx.state["gpu"].start()

    def after_compute(self, ctx: RankContext, step: int, seconds: float) -> None:
        """CUDA: spin the GPU; CPU fallback: stretch the op by (factor - 1) x its duration."""
        if ctx.state.get("gpu_active"):
            ctx.state["gpu"].finish()
        elif ctx.state.get("stretch"):
            time.sleep((self.factor - 1.0) * seconds)

    def undo(self, ctx: RankContext) -> None:
        if ctx.cgroup and ctx.state.get("slowed"):
            try:
                _write_quota(ctx.cgroup, ctx.cgroup["cores"])
            except OSError:
                pass  # the cgroup is already gone with the run
            ctx.state["slowed"] = False

    def measure(self, trace, run: dict) -> dict:
        ratio = compute_ratio(trace, self.spec)
        if run.get("backend") == "nccl" or _on_gpu(run, self.spec):
            mech = "gpu-sleep"
        elif _paced_to_rate(run):
            mech = "paced-rate"
        else:
            mech = "cpu-quota" if (run.get("isolation") or {}).get("enabled") else "stretch"
        return {"factor": None if ratio is None else round(ratio, 4), "mechanism": mech}


def _on_gpu(run: dict, spec) -> bool:
    """Whether a victim ran on a GPU (run.json `placement`): ranks sharing one GPU use gloo,
    so the backend alone does not say it (workloads/local_launcher.py)."""
    device = {p.get("rank"): str(p.get("device") or "") for p in run.get("placement") or []}
    return any(device.get(t.rank, "").startswith("cuda") for t in spec.targets)
