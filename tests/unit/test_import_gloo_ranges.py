"""CPU traces of torch 2.13's gloo backend: no record_param_comms, each call named twice.

What the torch-wrapper workloads' traces hold (workloads/torch_*.py): per
collective a short `c10d::allreduce_` range (the dispatcher's launch) and a
`gloo:all_reduce` range (the backend's work, on a gloo thread for an async
call), neither with args. The general op model takes the gloo range as the op
and not the launch too, which would otherwise be a second all-reduce per call,
matched by order against the other ranks' launches and refused as implausible.
"""

from __future__ import annotations

import pytest

from stragglerlab.analysis.whatif_general import whatif_general
from stragglerlab.importers.kineto_general import build_general, load_ranks
from tests.unit.general_fixtures import MS, _x, ddp_doc, write_docs

EXPECTED_S = 27.0 / 19.5  # general_fixtures: slow {3: 2.0}, fwd 10, ar 2, tail 5 ms


def _gloo_213(rank: int, world: int = 4) -> dict:
    """ddp_doc's job on CPU with its comm ops as torch 2.13's gloo writes them."""
    slow, fwd_ms, ar_ms = {3: 2.0}, 10.0, 2.0
    doc = ddp_doc(rank, world, slow=slow, gpu=False, comm=False)
    last = max(fwd_ms * slow.get(r, 1.0) for r in range(world)) * MS
    mine = fwd_ms * slow.get(rank, 1.0) * MS
    for step in [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]:
        t0 = step["ts"]
        doc["traceEvents"].append(_x("c10d::allreduce_", t0 + mine, 40.0))
        doc["traceEvents"].append(_x("gloo:all_reduce", t0 + mine + 40.0,
                                     last - mine + ar_ms * MS - 40.0, tid=9))
    return doc


def test_a_gloo_call_is_one_op_not_its_launch_and_its_work(tmp_path):
    folder = write_docs(tmp_path, {r: _gloo_213(r) for r in range(4)})
    res = build_general(load_ranks(sorted(folder.glob("*.json*"))))
    per_rank_step = res.ops[res.ops["kind"] == "all_reduce"].groupby(["rank", "step"]).size()
    assert set(per_rank_step) == {1}  # the launch range is not a second all-reduce
    assert res.report["groups"] == 2 and res.report["local_ops"] == 0
    wi = whatif_general(res.ops)
    assert wi.S == pytest.approx(EXPECTED_S, rel=1e-3) and wi.top_workers == [3]
