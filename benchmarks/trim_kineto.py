"""Cut a torch.profiler trace down to its first N ProfilerSteps, for a small test fixture.

    python benchmarks/trim_kineto.py --steps 2 IN.json.gz OUT.json.gz

Keeps the header, every metadata event, and the complete events from the first kept
step's start to the last kept step's end on the CPU, plus the GPU work and flow events
whose correlation id (a flow's id) a kept CPU call carries (a step's last kernels end after its CPU
range). The file is otherwise as the profiler wrote it.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def trim(doc: dict, steps: int) -> dict:
    """The trace with only its first `steps` ProfilerStep ranges' events."""
    ev = doc["traceEvents"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and
                   e.get("cat") == "user_annotation" and
                   str(e.get("name", "")).startswith("ProfilerStep#"))
    if len(spans) < steps:
        raise SystemExit(f"the trace has {len(spans)} ProfilerStep ranges, fewer than {steps}")
    t0, t1 = spans[0][0], spans[steps - 1][1]
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    cpu_in = [e for e in ev if e.get("ph") == "X" and e.get("cat") not in gpu
              and t0 <= e["ts"] <= t1]
    corr = {(e.get("args") or {}).get("correlation") for e in cpu_in} - {None}
    ext = {(e.get("args") or {}).get("External id") for e in cpu_in} - {None}
    keep = []
    for e in ev:
        a = e.get("args") or {}
        if e.get("ph") in ("M", None) or (e.get("ph") == "X" and e.get("cat") not in gpu
                                          and t0 <= e["ts"] <= t1):
            keep.append(e)
        elif e.get("cat") in gpu and (a.get("correlation") in corr
                                      or (e.get("cat") == "gpu_user_annotation"
                                          and a.get("External id") in ext)):
            keep.append(e)
        elif e.get("ph") in ("s", "f") and (t0 <= e.get("ts", -1) <= t1
                                            or e.get("id") in corr):
            keep.append(e)
    return {**doc, "traceEvents": keep}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args(argv)
    doc = json.load(gzip.open(args.src) if args.src.suffix == ".gz" else args.src.open())
    out = trim(doc, args.steps)
    with gzip.open(args.dst, "wt") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"{args.dst}: {len(out['traceEvents']):,} of {len(doc['traceEvents']):,} events, "
          f"{args.dst.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
