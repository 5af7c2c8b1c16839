"""Slow worker / slow GPU: the victim's device really gets slower by a factor.

On CPU (isolated ranks) the victim's cgroup CPU quota is divided by the factor
for the step window — the CPU analogue of capping a GPU's clock — so its
compute takes `factor` times longer (measured ±10%). Without CPU isolation
(no root / no cgroup v1) the named fallback `stretch` sleeps (factor - 1) x
the compute's own duration inside each compute op, an exact in-process
stretch. Measured: victim compute time over the same stages' other workers.

    - kind: slow-worker
      targets: [{dp_rank: 0, stage: 1}]
      params: {factor: 2.0}
"""

from __future__ import annotations

import time
from pathlib import Path

from injectors.base import Injector, RankContext, compute_ratio
from injectors.registry import register
from stragglerlab.faults import FaultKind

MIN_QUOTA_US = 1000  # the kernel's floor


def quota_for(cores: float, base_period_us: int) -> tuple[int, int]:
    """(period, quota) in us giving `cores`; the period grows when the quota would fall
    below the kernel's 1 ms floor (a deep slowdown of an already small share)."""
    period = max(base_period_us, int(-(-MIN_QUOTA_US // cores)))
    return period, max(MIN_QUOTA_US, int(round(cores * period)))


def _write_quota(cgroup: dict, cores: float) -> None:
    period, quota = quota_for(cores, cgroup["period_us"])
    cpu_dir = Path(cgroup["cpu_dir"])
    # Both stay >= 1 ms whichever is written first; period first keeps the new ratio exact.
    (cpu_dir / "cpu.cfs_period_us").write_text(str(period))
    (cpu_dir / "cpu.cfs_quota_us").write_text(str(quota))


@register
class SlowWorker(Injector):
    """Divide the victim's CPU share by `factor` during the window."""

    kind = FaultKind.SLOW_WORKER

    def check_params(self) -> None:
        self.factor = self.param("factor", lo=1.0, hi=20.0)

    def mechanism(self, ctx: RankContext) -> str:
        """'cpu-quota' when the rank is isolated, else the 'stretch' fallback."""
        return "cpu-quota" if ctx.cgroup else "stretch"

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        want = self.active(step)
        if ctx.cgroup and want != ctx.state.get("slowed", False):
            cores = ctx.cgroup["cores"] / self.factor if want else ctx.cgroup["cores"]
            _write_quota(ctx.cgroup, cores)
            ctx.state["slowed"] = want
        ctx.state["stretch"] = want and not ctx.cgroup

    def after_compute(self, ctx: RankContext, step: int, seconds: float) -> None:
        """Fallback only: stretch the compute op by (factor - 1) x its duration."""
        if ctx.state.get("stretch"):
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
        mech = "cpu-quota" if (run.get("isolation") or {}).get("enabled") else "stretch"
        return {"factor": None if ratio is None else round(ratio, 4), "mechanism": mech}
