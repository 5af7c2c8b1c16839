"""The slow-worker injector on a rank paced to a fixed rate: the device factor, no stretch."""

from __future__ import annotations

from stragglerlab.scenarios.faults import FaultKind
from tests.unit.injector_helpers import build, ctx_for, spec, target, timed


def test_a_paced_victim_gets_the_exact_factor_as_its_device_factor_and_no_stretch():
    victim = target(1, 1)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=1, last=1, factor=3.0))
    ctx = ctx_for(victim)  # no cgroup: the stretch fallback, were the rank not paced
    ctx.paced_to_rate = True
    inj.on_step_start(ctx, 0)
    assert ctx.device_factor == 1.0
    inj.on_step_start(ctx, 1)
    assert ctx.device_factor == 3.0
    # The pacer stretches the op; a sleep here would vanish into its padding.
    assert timed(inj.after_compute, ctx, 1, 0.02) < 0.01
    inj.on_step_start(ctx, 2)
    assert ctx.device_factor == 1.0


def test_a_paced_victim_keeps_its_cpu_quota(tmp_path):
    (tmp_path / "cpu.cfs_period_us").write_text("4000")
    (tmp_path / "cpu.cfs_quota_us").write_text("2000")
    cgroup = {"cpu_dir": str(tmp_path), "period_us": 4000, "cores": 0.5}
    victim = target(1, 0)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=1, last=1, factor=2.0))
    ctx = ctx_for(victim, cgroup=cgroup)
    inj.on_step_start(ctx, 0)
    ctx.paced_to_rate = True  # the engine settled its rate after step 0
    inj.on_step_start(ctx, 1)
    # The pacer makes the op 2x its nominal time; the CPU stays, as a slow GPU's host's.
    assert ctx.device_factor == 2.0
    assert (tmp_path / "cpu.cfs_quota_us").read_text() == "2000"
    assert not ctx.state.get("slowed")
