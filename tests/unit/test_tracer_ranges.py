"""Tracer(ranges=True): every op is a record_function range in a Kineto trace, async P2P too.

    .venv/bin/python -m pytest -q tests/unit/test_tracer_ranges.py
"""

from __future__ import annotations

import json
import threading
import time

import torch
from torch.profiler import ProfilerActivity, profile

from stragglerlab.trace.schema import OpType
from stragglerlab.workloads.tracer import Tracer, now


def test_sync_and_async_ops_become_ranges(tmp_path):
    tr = Tracer(tmp_path / "r.bin", ranges=True)
    cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg) as prof:
        tr.begin_step(0)
        row = tr.record(OpType.FORWARD_SEND, now(), float("nan"))  # async: closes later
        with tr.op(OpType.FORWARD_COMPUTE, mb_id=0):
            time.sleep(0.002)
        done = threading.Thread(target=lambda: (time.sleep(0.005), tr.set_end(row, now())))
        done.start()
        done.join()
        tr.end_step()
    tr.close()
    path = tmp_path / "k.json"
    prof.export_chrome_trace(str(path))
    ranges = {e["name"]: e for e in json.loads(path.read_text())["traceEvents"]
              if e.get("cat") == "user_annotation"}
    assert ranges["forward-compute"]["dur"] >= 2000
    send = ranges["forward-send"]
    assert send["dur"] >= 7000 and send["args"].get("finished", True) is not False
