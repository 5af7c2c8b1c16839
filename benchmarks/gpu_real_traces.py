"""Real single-rank GPU traces of plain PyTorch training loops, one per kind of host-device
behaviour real jobs show, each profiled by torch.profiler (CPU + CUDA) over its steps.

    python benchmarks/gpu_real_traces.py --out /tmp/gpu-real            # every kind, on CUDA
    python benchmarks/gpu_real_traces.py --kinds launch-bound --device cpu --out /tmp/x

No stragglerlab code runs in the loops: these are the traces a user of torch brings, not
ours. `benchmarks/gpu_trace_check.sh` imports each one (`stragglerlab import kineto
--traces FILE`: the host-device replay of one rank) and reports each step's discrepancy.
The kinds:

* device-bound: a bf16 transformer block stack, AdamW, `loss.item()` each step;
* launch-bound: a deep narrow MLP, batch 8: many short kernels, the GPU waits for launches;
* multi-stream: the next batch copied host-to-device on a side stream (pinned memory,
  `wait_stream`: cudaEventRecord / cudaStreamWaitEvent) and an EMA of the weights on a
  second side stream, joined before the next step;
* host-stall: a DataLoader with 2 workers whose items sometimes take 5-20 ms (the
  step waits on the host, the GPU idles);
* sync-heavy: `torch.cuda.synchronize()` after forward and backward, and several
  metrics read with `.item()`;
* amp-scaler: fp16 autocast with a GradScaler (its inf check reads the device);
* cuda-graph: forward and backward captured once as a CUDA graph and replayed
  (`cudaGraphLaunch`: kernels with no launch call of their own).

Each kind writes `<out>/<kind>-rank0.json.gz` and prints its step times (wall, from the
host) so the import's traced times can be held against them.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from torch import nn

KINDS = ("device-bound", "launch-bound", "multi-stream", "host-stall", "sync-heavy",
         "amp-scaler", "cuda-graph")
WAIT, WARMUP = 1, 2
"""torch.profiler schedule steps before the profiled ones."""


def _blocks(hidden: int, layers: int, heads: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, batch_first=True,
                                       dropout=0.0)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class _Slow(torch.utils.data.Dataset):
    """Token batches, one item in four taking 5-20 ms of host time (a slow decode)."""

    def __init__(self, n: int, seq: int, hidden: int) -> None:
        self.n, self.seq, self.hidden = n, seq, hidden

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = random.Random(i)
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.005, 0.020))
        return torch.randn(self.seq, self.hidden, generator=torch.Generator().manual_seed(i))


def _profile(kind: str, out: Path, device: torch.device, steps: int, step_fn) -> list[float]:
    """Run WAIT + WARMUP + steps steps of `step_fn(i)` under the profiler; host step times."""
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path = out / f"{kind}-rank0.json.gz"
    times = []
    with profile(activities=acts, schedule=schedule(wait=WAIT, warmup=WARMUP, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for i in range(WAIT + WARMUP + steps):
            t0 = time.perf_counter()
            step_fn(i)
            times.append(time.perf_counter() - t0)
            prof.step()
    return times[WAIT + WARMUP:]


def _train_step(model, opt, x, scaler=None, amp=None):
    with torch.autocast(x.device.type, dtype=amp, enabled=amp is not None):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss


def run_kind(kind: str, out: Path, device: torch.device, steps: int) -> list[float]:
    """Build the kind's loop and profile it; the host step times, seconds."""
    torch.manual_seed(0)
    big = device.type == "cuda"
    if kind == "launch-bound":
        model = nn.Sequential(*[m for _ in range(48) for m in (nn.Linear(64, 64), nn.GELU())])
        model = model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
        x = torch.randn(8, 64, device=device)
        return _profile(kind, out, device, steps, lambda i: _train_step(model, opt, x).item())
    hidden, layers, seq, batch = (1024, 6, 512, 16) if big else (64, 2, 16, 2)
    model = _blocks(hidden, layers, 8).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if kind == "device-bound":
        model = model.to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(batch, seq, hidden, device=device, dtype=torch.bfloat16)
        return _profile(kind, out, device, steps, lambda i: _train_step(model, opt, x).item())
    if kind == "multi-stream":
        copy_s = torch.cuda.Stream() if big else None
        ema_s = torch.cuda.Stream() if big else None
        ema = [p.detach().clone() for p in model.parameters()]
        host = torch.randn(batch, seq, hidden).pin_memory() if big else torch.randn(
            batch, seq, hidden)
        nxt = {"x": host.to(device)}

        def step(i):
            x = nxt["x"]
            if big:
                with torch.cuda.stream(copy_s):
                    nxt["x"] = host.to(device, non_blocking=True)
            loss = _train_step(model, opt, x)
            if big:
                ema_s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(ema_s):
                    torch._foreach_lerp_(ema, list(model.parameters()), 0.01)
                torch.cuda.current_stream().wait_stream(copy_s)
                torch.cuda.current_stream().wait_stream(ema_s)
            return loss.item()
        return _profile(kind, out, device, steps, step)
    if kind == "host-stall":
        loader = torch.utils.data.DataLoader(_Slow(10_000, seq, hidden), batch_size=batch,
                                             num_workers=2, pin_memory=big)
        it = iter(loader)
        return _profile(kind, out, device, steps, lambda i: _train_step(
            model, opt, next(it).to(device, non_blocking=True)).item())
    if kind == "sync-heavy":
        x = torch.randn(batch, seq, hidden, device=device)

        def step(i):
            y = model(x)
            loss = y.pow(2).mean()
            if big:
                torch.cuda.synchronize()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if big:
                torch.cuda.synchronize()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return [loss.item(), gn.item(), y.abs().max().item()]
        return _profile(kind, out, device, steps, step)
    if kind == "amp-scaler":
        scaler = torch.amp.GradScaler(device.type, enabled=big)
        x = torch.randn(batch, seq, hidden, device=device)
        amp = torch.float16 if big else torch.bfloat16
        return _profile(kind, out, device, steps,
                        lambda i: _train_step(model, opt, x, scaler, amp).item())
    if kind == "cuda-graph":
        x = torch.randn(batch, seq, hidden, device=device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        if not big:
            return _profile(kind, out, device, steps, lambda i: _train_step(model, opt, x).item())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm the allocator and autograd before capture
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                model(x).pow(2).mean().backward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = model(x).pow(2).mean()
            loss.backward()

        def step(i):
            graph.replay()
            opt.step()
            return loss.item()
        return _profile(kind, out, device, steps, step)
    raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the traces")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--steps", type=int, default=6, help="profiled steps per kind")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", type=Path, help="also write the host step times here")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    times = {}
    for kind in args.kinds:
        t0 = time.perf_counter()
        try:
            times[kind] = run_kind(kind, args.out, device, args.steps)
        except Exception as e:  # one kind's failure must not lose the others' traces
            print(f"{kind}: FAILED {type(e).__name__}: {e}", flush=True)
            continue
        ms = ", ".join(f"{t * 1e3:.2f}" for t in times[kind])
        print(f"{kind}: host step ms {ms}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(times, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
