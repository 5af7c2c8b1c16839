"""Trim a run's Kineto traces to what the general op model reads, for the examples.

Keeps each rank's `ProfilerStep#N` ranges, its communication ranges
(`c10d::*`, `gloo:*`, `nccl:*`, `record_param_comms`), its backward ops
(`autograd::engine::evaluate_function: *`, which tell an async collective:
the thread computed on while it ran), the wrappers' own top-level ranges
(`DistributedDataParallel.*`, `FSDP::*`, `PipelineSchedule*`,
`PipelineStage*`), and the file's metadata (`distributedInfo`, ...); drops the
aten ops between them. The general op model's compute segments are the spans
between communication ops, so the import of the trimmed files gives the same S
as the full ones (checked when the examples were made: identical whatif.json S).

    .venv/bin/python examples/trim_kineto.py RUN/kineto examples/torch-ddp
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

KEEP_PREFIXES = ("ProfilerStep#", "c10d::", "gloo:", "nccl:", "record_param_comms",
                 "autograd::engine::evaluate_function", "DistributedDataParallel", "FSDP::",
                 "PipelineSchedule", "PipelineStage")


def trim(src: Path, dst: Path) -> None:
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("ph") != "X" or str(e.get("name", "")).startswith(KEEP_PREFIXES)]
    # mtime 0: the same traces give byte-identical files.
    with gzip.GzipFile(dst, "wb", mtime=0) as f:
        f.write(json.dumps(doc, separators=(",", ":")).encode())


def main() -> int:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("rank*.json.gz")):
        trim(path, dst / path.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
