"""GPU-side sleep: stretch a CUDA compute op by a factor, on the victim's own stream.

The CUDA mechanism of the slow-worker injector (injectors/slow_worker.py): the
compute op's GPU time is measured with CUDA events around the model call,
then `torch.cuda._sleep` spins the victim's stream for (factor - 1) times
that long, so everything queued after it on that GPU waits, as it would on a
slower or clock-capped GPU. Spin cycles per second are calibrated once per
rank. torch is imported only when a CUDA rank uses it.

    stretch = GpuStretch(factor=1.5); stretch.start(); model(...); stretch.finish()
"""

from __future__ import annotations

CALIBRATION_CYCLES = 50_000_000
"""Spin length used to measure the GPU's spin rate (tens of ms on current GPUs)."""


def spin_cycles(extra_s: float, cycles_per_s: float) -> int:
    """Spin cycles that take extra_s seconds at the calibrated rate (0 for no extra time)."""
    return max(int(extra_s * cycles_per_s), 0)


class GpuStretch:
    """Measures each compute op's GPU time and appends a spin of (factor - 1) x that time."""

    def __init__(self, factor: float) -> None:
        import torch

        self.torch = torch
        self.factor = factor
        self.cycles_per_s = self._calibrate()
        self._start = None

    def _calibrate(self) -> float:
        torch = self.torch
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(CALIBRATION_CYCLES // 10)  # warm-up
        begin.record()
        torch.cuda._sleep(CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        return CALIBRATION_CYCLES / (begin.elapsed_time(end) / 1000.0)

    def start(self) -> None:
        """Before the model call: mark the stream."""
        self._start = self.torch.cuda.Event(enable_timing=True)
        self._start.record()

    def finish(self) -> float:
        """After the model call: spin for (factor - 1) x its GPU time; returns that time, s."""
        end = self.torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        gpu_s = self._start.elapsed_time(end) / 1000.0
        self.torch.cuda._sleep(spin_cycles((self.factor - 1.0) * gpu_s, self.cycles_per_s))
        return gpu_s
