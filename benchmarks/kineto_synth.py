"""Synthetic multi-rank Kineto traces shaped like a DDP transformer job's, at a chosen size.

    python benchmarks/kineto_synth.py --ranks 8 --mb 100 --steps 6 --out /tmp/synth/100mb

Each rank's file is what torch.profiler (torch >= 2.4: timestamps with ns
digits) writes for a GPU DDP job: `ProfilerStep#N` ranges; per layer the
nested CPU ops of forward (aten::linear > aten::t > aten::transpose >
aten::as_strided, aten::addmm, ...) and of backward on the autograd thread
(autograd::engine::evaluate_function: XBackward0 > XBackward0 > aten::mm);
one `cudaLaunchKernel` per kernel with its `ac2g` flow pair and the kernel
(correlation, External id, grid, block, occupancy args); DDP bucket
all-reduces as `record_param_comms` + `nccl:all_reduce` on the CPU and an
`ncclDevKernel_AllReduce_Sum_f32_RING_LL` kernel carrying the collective args
torch writes (Collective name, dtype, msg nelems, Group size, Process Group
Name / Description / Ranks, Rank, Seq); an optimizer step; memcpy/memset;
`M` metadata; `distributedInfo` with pg_config; `deviceProperties`.

Timing is consistent across ranks (one plan): GPU-bound ranks whose compute
stream runs back to back; a bucket's all-reduce starts on the NCCL stream when
its gradients are ready and ends when the last rank's is plus the transfer, so
fast ranks wait for `--slow-rank` (compute `--slow-factor` times longer). The
size is reached by the number of layers per step.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

MAIN_TID, BWD_TID, PID = 3001, 3077, 3001
COMPUTE_STREAM, NCCL_STREAM = 7, 21
BUCKETS = 8
"""DDP all-reduce buckets per step."""
# (cpu op, nested cpu ops, kernel name, kernel base duration us) per layer, forward.
FWD = [("aten::linear", ("aten::t", "aten::transpose", "aten::as_strided"), "aten::addmm",
        "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas", 180.0),
       ("aten::scaled_dot_product_attention", ("aten::_scaled_dot_product_flash_attention",),
        "aten::_flash_attention_forward",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
        "false, cutlass::bfloat16_t>, false, true, false, false, true, true, false>("
        "pytorch_flash::Flash_fwd_params)", 240.0),
       ("aten::linear", ("aten::t", "aten::transpose", "aten::as_strided"), "aten::addmm",
        "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x128x32_cublas", 90.0),
       ("aten::add", (), "aten::add",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
        " at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3>)", 12.0),
       ("aten::layer_norm", ("aten::native_layer_norm",), "aten::native_layer_norm",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
        "(int, float, float const*, float const*, float const*, float*, float*, float*)", 15.0),
       ("aten::linear", ("aten::t", "aten::transpose", "aten::as_strided"), "aten::addmm",
        "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x256x32_cublas", 330.0),
       ("aten::gelu", (), "aten::gelu",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
        "(int, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2>)", 25.0),
       ("aten::linear", ("aten::t", "aten::transpose", "aten::as_strided"), "aten::addmm",
        "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x32_cublas", 320.0)]
BWD = [("AddmmBackward0", "aten::mm", 2), ("GeluBackward0", "aten::gelu_backward", 1),
       ("AddmmBackward0", "aten::mm", 2), ("NativeLayerNormBackward0",
                                           "aten::native_layer_norm_backward", 2),
       ("AddBackward0", "aten::add_", 1), ("AddmmBackward0", "aten::mm", 2),
       ("ScaledDotProductFlashAttentionBackward0", "aten::_flash_attention_backward", 1),
       ("AddmmBackward0", "aten::mm", 2)]
BWD_KERNEL = "sm90_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x128x32_cublas"
FWD_US = sum(k[4] for k in FWD)
BWD_US = 2.0 * FWD_US
"""Backward compute per layer (us), spread over its kernels."""
EVENT_BYTES = 300.0
"""Average JSON bytes per event (measured on these files) to size a step."""
EVENTS_PER_LAYER = 118
"""Events one layer writes (forward + backward)."""


def plan(ranks: int, steps: int, layers: int, slow_rank: int, slow_factor: float,
         seed: int = 0) -> dict:
    """The cross-rank timeline: per step, per rank, the compute factor and each bucket's
    all-reduce start/end (us from the step start)."""
    rnd = np.random.default_rng(seed)
    factor = np.ones(ranks)
    if 0 <= slow_rank < ranks:
        factor[slow_rank] = slow_factor
    per_bucket = max(1, layers // BUCKETS)
    out = []
    for _ in range(steps):
        jit = factor * rnd.uniform(0.98, 1.02, ranks)  # per rank and step
        fwd = layers * FWD_US * jit
        ready, nccl_free, ar = fwd.copy(), np.zeros(ranks), []
        for b in range(BUCKETS):
            n = per_bucket if b < BUCKETS - 1 else layers - per_bucket * (BUCKETS - 1)
            ready = ready + n * BWD_US * jit
            start = np.maximum(ready, nccl_free)
            end = start.max() + 900.0  # the transfer begins when the last member arrives
            ar.append((start, np.full(ranks, end)))
            nccl_free = ar[-1][1]
        gpu_end = np.maximum(ready, nccl_free) + 400.0 * jit  # optimizer
        out.append({"jit": jit, "ar": ar, "end": float(gpu_end.max()) + 60.0})
    return {"steps": out, "layers": layers, "per_bucket": per_bucket}


class Writer:
    """Streams one rank's events as JSON text; times in us with ns digits."""

    def __init__(self, f, rank: int, world: int):
        self.f, self.rank, self.world = f, rank, world
        self.rnd = random.Random(rank)
        self.ext, self.corr, self.ev_idx, self.seq, self.first = 1, 1, 0, 0, True
        self.buf: list[bytes] = []

    def emit(self, e: dict) -> None:
        self.buf.append(json.dumps(e).encode())  # torch's ', ' / ': ' spacing
        if len(self.buf) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.f.write((b"" if self.first else b",\n") + b",\n".join(self.buf))
            self.first, self.buf = False, []

    def cpu(self, name: str, ts: float, dur: float, tid: int, **args) -> None:
        self.ext += 1
        self.ev_idx += 1
        self.emit({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid,
                   "ts": round(ts, 3), "dur": round(dur, 3),
                   "args": {"External id": self.ext, "Record function id": 0,
                            "Ev Idx": self.ev_idx, **args}})

    def launch(self, ts: float, tid: int, kernel: str, kts: float, kdur: float,
               stream: int = COMPUTE_STREAM, kargs: dict | None = None) -> None:
        c = self.corr
        self.corr += 1
        self.emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID,
                   "tid": tid, "ts": round(ts, 3), "dur": 4.121,
                   "args": {"External id": self.ext, "cbid": 211, "correlation": c}})
        self.emit({"ph": "s", "id": c, "pid": PID, "tid": tid, "ts": round(ts, 3),
                   "cat": "ac2g", "name": "ac2g"})
        args = kargs or {"registers per thread": 128, "shared memory": 49152,
                         "blocks per SM": 1.185, "warps per SM": 9.48,
                         "grid": [160, 1, 1], "block": [256, 1, 1],
                         "est. achieved occupancy %": 25}
        self.emit({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream,
                   "ts": round(kts, 3), "dur": round(kdur, 3),
                   "args": {"External id": self.ext, "queued": 0, "device": self.rank,
                            "context": 1, "stream": stream, "correlation": c, **args}})
        self.emit({"ph": "f", "id": c, "pid": 0, "tid": stream, "ts": round(kts, 3),
                   "cat": "ac2g", "name": "ac2g", "bp": "e"})


    def memcpy(self, ts: float, kts: float) -> None:
        c = self.corr
        self.corr += 1
        self.emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": PID,
                   "tid": MAIN_TID, "ts": round(ts, 3), "dur": 9.5,
                   "args": {"External id": self.ext, "cbid": 41, "correlation": c}})
        self.emit({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
                   "pid": 0, "tid": COMPUTE_STREAM, "ts": round(kts, 3), "dur": 20.0,
                   "args": {"External id": self.ext, "device": self.rank, "context": 1,
                            "stream": COMPUTE_STREAM, "correlation": c, "bytes": 262144,
                            "memory bandwidth (GB/s)": 13.1}})


DIMS = {"Input Dims": [[8, 2048, 4096], [4096, 4096], [4096]],
        "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],
        "Input Strides": [[8388608, 4096, 1], [4096, 1], [1]],
        "Concrete Inputs": ["", "", ""]}


def _forward(w: Writer, t_cpu: float, t_gpu: float, jit: float) -> tuple[float, float]:
    for op, nested, inner, kernel, kus in FWD:
        dur = kus * jit * w.rnd.uniform(0.97, 1.03)
        t0 = t_cpu
        t = t0 + 2.0
        for i, n in enumerate(nested[:-1] if inner == "aten::addmm" else nested):
            w.cpu(n, t + i, 6.0 - i, MAIN_TID, **DIMS)
        t += 8.0
        w.cpu(inner, t, 14.0, MAIN_TID, **DIMS)
        w.launch(t + 5.0, MAIN_TID, kernel, max(t_gpu, t + 12.0), dur)
        t_gpu = max(t_gpu, t + 12.0) + dur + 1.7
        t_cpu = t + 20.0
        w.cpu(op, t0, t_cpu - t0, MAIN_TID, **DIMS)
        t_cpu += 3.0
    return t_cpu, t_gpu


def _backward(w: Writer, t_cpu: float, t_gpu: float, jit: float) -> tuple[float, float]:
    per_kernel = BWD_US / sum(k for _, _, k in BWD)
    for fn, op, nk in BWD:
        t0 = t_cpu
        t = t0 + 4.0
        w.cpu(fn, t0 + 2.0, 10.0 + 25.0 * nk, BWD_TID, **{"Sequence number": w.ext,
                                                           "Fwd thread id": 1})
        for _ in range(nk):
            dur = per_kernel * jit * w.rnd.uniform(0.97, 1.03)
            w.cpu("aten::t", t, 3.0, BWD_TID, **DIMS)
            w.cpu(op, t + 5.0, 14.0, BWD_TID, **DIMS)
            w.launch(t + 9.0, BWD_TID, BWD_KERNEL, max(t_gpu, t + 16.0), dur)
            t_gpu = max(t_gpu, t + 16.0) + dur + 1.9
            t += 25.0
        t_cpu = t + 2.0
        w.cpu("autograd::engine::evaluate_function: " + fn, t0, t_cpu - t0, BWD_TID)
        t_cpu += 3.0
    return t_cpu, t_gpu


def _allreduce(w: Writer, t_cpu: float, start: float, end: float, nelems: int) -> float:
    ranks = list(range(w.world))
    comm = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": nelems,
            "Out msg nelems": nelems, "In split size": "[]", "Out split size": "[]",
            "Group size": w.world, "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": str(ranks),
            "Rank": w.rank, "Seq": w.seq}
    w.seq += 1
    w.cpu("nccl:all_reduce", t_cpu, 30.0, BWD_TID, **{"Input Dims": [[nelems]],
                                                       "Input type": ["float"]})
    w.cpu("record_param_comms", t_cpu + 2.0, 26.0, BWD_TID, **comm)
    w.launch(t_cpu + 10.0, BWD_TID, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, "
             "unsigned long, ncclWork*)", start, end - start, NCCL_STREAM,
             {"blocks per SM": 0.02, "warps per SM": 0.08, "grid": [2, 1, 1],
              "block": [640, 1, 1], "est. achieved occupancy %": 0, **comm})
    return t_cpu + 32.0


def write_rank(path: Path, rank: int, world: int, p: dict, gz: bool) -> None:
    """One rank's trace, following plan p."""
    op = gzip.open(path, "wb", compresslevel=1) if gz else open(path, "wb")
    base = 1_000_000.0  # us after baseTimeNanoseconds (torch >= 2.4): ns digits fit a double
    with op as f:
        pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                "pg_size": world, "ranks": list(range(world))}]
        f.write(json.dumps({"schemaVersion": 1, "deviceProperties": [
            {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592,
             "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                                "pg_count": 1, "pg_config": pgs, "nccl_version": "2.21.5"},
            "record_shapes": 1, "with_stack": 0})[:-1].encode() + b', "traceEvents": [\n')
        w = Writer(f, rank, world)
        for kind, name, tid in (("process_name", "python 3001", 0),
                                ("thread_name", "thread 3001 (python)", MAIN_TID),
                                ("thread_name", "thread 3077 (pt_autograd_0)", BWD_TID)):
            w.emit({"name": kind, "ph": "M", "ts": base, "pid": PID, "tid": tid,
                    "args": {"name": name}})
        t_step = base + 5000.0
        layers, per_bucket = p["layers"], p["per_bucket"]
        for s, st in enumerate(p["steps"]):
            jit = float(st["jit"][rank])
            t_cpu, t_gpu = t_step + 40.0, t_step + 60.0
            w.memcpy(t_cpu, t_gpu)
            t_gpu += 25.0
            for _ in range(layers):
                t_cpu, t_gpu = _forward(w, t_cpu, t_gpu, jit)
            b = 0
            for i in range(layers):
                t_cpu, t_gpu = _backward(w, t_cpu, t_gpu, jit)
                if (i + 1) % per_bucket == 0 and b < BUCKETS - 1 or i == layers - 1:
                    start, end = (t_step + 60.0 + float(x[rank]) for x in st["ar"][b])
                    t_cpu = _allreduce(w, t_cpu, start, end, 25_000_000)
                    b += 1
            w.cpu("Optimizer.step#AdamW.step", t_cpu, 60.0, MAIN_TID)
            w.launch(t_cpu + 20.0, MAIN_TID, "void at::native::(anonymous namespace)::"
                     "multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
                     "TensorListMetadata<4>, FusedAdamMathFunctor<float, 4>>",
                     t_step + 60.0 + float(st["ar"][-1][1][rank]), 400.0 * jit)
            end = t_step + st["end"]
            w.emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                    "pid": PID, "tid": MAIN_TID, "ts": round(t_cpu + 90.0, 3),
                    "dur": round(max(end - t_cpu - 100.0, 1.0), 3),
                    "args": {"External id": w.ext, "cbid": 131, "correlation": 0}})
            w.emit({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                    "pid": PID, "tid": MAIN_TID, "ts": round(t_step, 3),
                    "dur": round(end - t_step, 3), "args": {"External id": w.ext}})
            t_step = end + 30.0
        w.flush()
        f.write(b'\n], "traceName": "' + str(path).encode() + b'", '
                b'"displayTimeUnit": "ms", "baseTimeNanoseconds": 1764000000000000000}\n')


def layers_for(mb: float, steps: int) -> int:
    return max(BUCKETS, round(mb * 1e6 / EVENT_BYTES / EVENTS_PER_LAYER / steps))


def write_job(out: Path, ranks: int, mb: float, steps: int, slow_rank: int = 3,
              slow_factor: float = 1.25, gz: bool = True, workers: int = 2) -> list[Path]:
    """Every rank's file under out/ (kept when present: the plan is deterministic)."""
    out.mkdir(parents=True, exist_ok=True)
    p = plan(ranks, steps, layers_for(mb, steps), slow_rank, slow_factor)
    paths = [out / f"rank{r}.json{'.gz' if gz else ''}" for r in range(ranks)]
    todo = [(pth, r) for r, pth in enumerate(paths) if not pth.exists()]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(_write_tmp, pth, r, ranks, p, gz) for pth, r in todo]:
            f.result()
    return paths


def _write_tmp(path: Path, rank: int, world: int, p: dict, gz: bool) -> None:
    tmp = path.with_name(path.name + ".part")  # HTA reads every *.gz / *.json in the folder
    write_rank(tmp, rank, world, p, gz)
    tmp.rename(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=100.0, help="JSON MB per rank (about)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--plain", action="store_true", help="write .json, not .json.gz")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for p in write_job(Path(a.out), a.ranks, a.mb, a.steps, gz=not a.plain):
        print(p)


if __name__ == "__main__":
    main()
