"""Batched variable-length attention equals one causal attention per packed sequence."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from stragglerlab.workloads.varlen import (  # noqa: E402
    VarlenLayout,
    bucket_length,
    varlen_causal_attention,
)


def loop_attention(qkv, seq_lens):
    """The reference: one SDPA call per sequence."""
    outs, start = [], 0
    for n in seq_lens:
        q, k, v = (qkv[start:start + n, i].transpose(0, 1) for i in range(3))
        outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1))
        start += n
    return torch.cat(outs)


@pytest.mark.parametrize("seq_lens", [[64, 64, 64], [100, 20, 7, 129], [1], [17, 16, 15, 200],
                                      [33] * 5 + [2]])
def test_matches_per_sequence_loop_forward_and_backward(seq_lens):
    torch.manual_seed(0)
    qkv = torch.randn(sum(seq_lens), 3, 2, 8, requires_grad=True)
    ref = loop_attention(qkv, seq_lens)
    (g_ref,) = torch.autograd.grad(ref.square().sum(), qkv)
    out = varlen_causal_attention(qkv, VarlenLayout.build(seq_lens))
    (g_out,) = torch.autograd.grad(out.square().sum(), qkv)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g_out, g_ref, rtol=1e-4, atol=1e-5)


def test_buckets_bound_padding_and_calls():
    assert [bucket_length(n) for n in (1, 16, 17, 31, 64, 65, 100, 1000)] == \
        [16, 16, 20, 32, 64, 80, 112, 1024]
    for n in range(16, 3000):
        assert n <= bucket_length(n) < 1.25 * n
    layout = VarlenLayout.build([64] * 4)
    assert len(layout.buckets) == 1 and layout.inverse is None and layout.buckets[0].src is None
    layout = VarlenLayout.build([5, 300, 9, 290, 3])
    assert len(layout.buckets) == 2  # the two long ones share 320, the short ones 16
    assert layout.padded_square_sum() == 2 * 320 ** 2 + 3 * 16 ** 2


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        varlen_causal_attention(torch.zeros(10, 3, 2, 4), VarlenLayout.build([4, 4]))
    with pytest.raises(ValueError):
        bucket_length(0)
