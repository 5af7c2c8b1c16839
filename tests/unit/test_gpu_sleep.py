"""The slow-worker injector's CUDA mechanism: a GPU-side spin on the victim's stream."""

from __future__ import annotations

import pytest

from stragglerlab.injectors.gpu_sleep import spin_cycles
from stragglerlab.scenarios.faults import FaultKind
from tests.unit.injector_helpers import build, ctx_for, spec, target


def test_spin_cycles_scale_with_the_extra_time():
    assert spin_cycles(0.01, 1.5e9) == 15_000_000
    assert spin_cycles(0.0, 1.5e9) == 0
    assert spin_cycles(-0.001, 1.5e9) == 0


def test_cuda_rank_uses_gpu_sleep_and_leaves_the_cpu_share_alone(tmp_path):
    victim = target(1, 0)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=5, factor=2.0))
    cgroup = {"cpu_dir": str(tmp_path / "missing"), "period_us": 4000, "cores": 0.5}
    ctx = ctx_for(victim, cgroup=cgroup, device="cuda:1")
    assert inj.mechanism(ctx) == "gpu-sleep"
    inj.on_step_start(ctx, 0)  # outside the window: nothing built, no quota written
    assert ctx.state["gpu_active"] is False and "gpu" not in ctx.state
    assert inj.mechanism(ctx_for(victim, cgroup=cgroup)) == "cpu-quota"
    assert inj.mechanism(ctx_for(victim)) == "stretch"


@pytest.mark.gpu
def test_gpu_sleep_stretches_compute_by_the_factor():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from stragglerlab.injectors.gpu_sleep import GpuStretch

    a = torch.randn(4096, 4096, device="cuda")

    def op_time(stretch: GpuStretch | None) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(5):
            if stretch:
                stretch.start()
            a @ a
            if stretch:
                stretch.finish()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end)

    op_time(None)  # warm-up
    base = min(op_time(None) for _ in range(3))
    slowed = min(op_time(GpuStretch(1.8)) for _ in range(3))
    assert slowed / base == pytest.approx(1.8, rel=0.1)
