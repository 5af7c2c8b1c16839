"""P2P matching rules (design.md Appendix A) on hand-made streams."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.p2p import match_stream
from stragglerlab.util.errors import InputError


def match(is_recv, op_start, op_end, comp_start, comp_end, stage=1, pp=4, vpp=1, gmc=None,
          forward=True):
    n = len(comp_start)
    return match_stream(
        is_recv=is_recv, op_start=np.array(op_start, float), op_end=np.array(op_end, float),
        compute_start=np.array(comp_start, float), compute_end=np.array(comp_end, float),
        compute_gmc=np.array(gmc if gmc is not None else [stage] * n), forward=forward,
        stage=stage, pp_size=pp, vpp_size=vpp, where="t.parquet",
    ).compute_index.tolist()


COMP_START, COMP_END = [1.0, 2.0, 3.0], [1.5, 2.5, 3.5]


def test_one_to_one():
    assert match(True, [0.5, 1.6, 2.6], [1.0, 2.0, 3.0], COMP_START, COMP_END) == [0, 1, 2]


def test_recv_after_last_compute_start_is_noop():
    got = match(True, [0.5, 1.6, 2.6, 3.6], [1, 2, 3, 4], COMP_START, COMP_END)
    assert got == [0, 1, 2, -1]


def test_send_ending_before_first_compute_end_is_noop():
    got = match(False, [0.1, 1.5, 2.5, 3.5], [0.2, 1.6, 2.6, 3.6], COMP_START, COMP_END)
    assert got == [-1, 0, 1, 2]


def test_one_short_on_first_stage_recv_matches_from_second_compute():
    assert match(True, [1.6, 2.6], [2.0, 3.0], COMP_START, COMP_END, stage=0) == [1, 2]
    assert match(False, [1.5, 2.5], [1.6, 2.6], COMP_START, COMP_END, stage=0) == [0, 1]


def test_one_short_on_middle_stage_is_an_error():
    with pytest.raises(InputError, match="stage 1 has 2 valid recv"):
        match(True, [1.6, 2.6], [2.0, 3.0], COMP_START, COMP_END, stage=1)


def test_virtual_stage_peer_out_of_range_is_noop():
    # forward recv on stage 0: chunk gmc 0 has no previous chunk, gmc 4 (chunk 1) does.
    got = match(True, [0.5, 1.6, 2.6], [1, 2, 3], COMP_START, COMP_END, stage=0, pp=4, vpp=2,
                gmc=[0, 4, 4])
    assert got == [-1, 1, 2]
