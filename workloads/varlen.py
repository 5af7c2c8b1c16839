"""Batched variable-length causal attention over a packed microbatch.

A packed microbatch holds several sequences in one row of tokens; attention
must stay inside each sequence. A per-sequence Python loop (one
`scaled_dot_product_attention` call per sequence) makes the cost on CPU a
per-call overhead times the number of sequences, which hides the sum(s^2)
term that makes long sequences expensive on GPUs (paper §5.3, Fig. 9). A dense
block-diagonal mask over the whole row has the opposite flaw: it costs
tokens^2 whatever the lengths. Here sequences are grouped into length buckets
(four per octave, at least 16 tokens), each bucket is gathered into one padded
[n, heads, L, head_dim] batch, right-padded, and runs as one causal SDPA call:
padding sits after every real token, so a causal query never sees it and no
mask is needed. The cost is sum over sequences of L^2 with L / s in [1, 1.19)
for s >= 16, i.e. proportional to sum(s^2), with a handful of calls per
microbatch. `benchmarks/bench_attention.py` measures the scaling.

    layout = VarlenLayout.build([100, 20, 7, 129], device)   # once per microbatch
    out = varlen_causal_attention(qkv, layout)               # qkv [tokens, 3, heads, d]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

MIN_BUCKET = 16
"""Shortest padded length: tiny sequences share one bucket (their cost is negligible)."""
BUCKETS_PER_OCTAVE = 4
"""Length buckets per doubling: padding adds at most 2^(1/4)-ish, ~19% in length."""


def bucket_length(seq_len: int) -> int:
    """Padded length of a sequence: a multiple of 2^(floor(log2 s) - 2), at least MIN_BUCKET."""
    if seq_len < 1:
        raise ValueError(f"sequence length must be >= 1, got {seq_len}")
    if seq_len <= MIN_BUCKET:
        return MIN_BUCKET
    step = max(1, 2 ** (int(math.log2(seq_len)) - int(math.log2(BUCKETS_PER_OCTAVE))))
    return -(-seq_len // step) * step


@dataclass(frozen=True, kw_only=True)
class BucketBatch:
    """One SDPA call: `n` sequences padded to length `length`."""

    n: int
    """Sequences in the bucket."""
    length: int
    """Padded length L of every sequence in the bucket."""
    src: torch.Tensor | None
    """[n * L] row of the (tokens + 1)-row input gathered into each slot (tokens = the
    zero padding row); None when the bucket is the whole microbatch in order, unpadded."""
    keep: torch.Tensor | None
    """[real tokens] slots holding real tokens, in bucket order; None when nothing is padded."""

    def __post_init__(self) -> None:
        if self.n < 1 or self.length < 1:
            raise ValueError(f"a bucket needs n >= 1 and length >= 1, got {self.n}, {self.length}")


@dataclass(frozen=True, kw_only=True)
class VarlenLayout:
    """How one packed microbatch's sequences map onto bucketed SDPA calls."""

    tokens: int
    """Tokens in the microbatch (sum of the sequence lengths)."""
    buckets: tuple[BucketBatch, ...]
    """One entry per SDPA call, longest bucket first."""
    inverse: torch.Tensor | None
    """Permutation from bucket order back to token order; None when it is the identity."""

    def __post_init__(self) -> None:
        if not self.buckets:
            raise ValueError("a layout needs at least one sequence")

    @classmethod
    def build(cls, seq_lens: list[int], device: torch.device | str = "cpu") -> VarlenLayout:
        """Group the sequences by bucket_length; index tensors live on `device`."""
        tokens = sum(seq_lens)
        starts = [0]
        for n in seq_lens[:-1]:
            starts.append(starts[-1] + n)
        by_bucket: dict[int, list[int]] = {}
        for i, n in enumerate(seq_lens):
            by_bucket.setdefault(bucket_length(n), []).append(i)
        if len(by_bucket) == 1 and all(n == next(iter(by_bucket)) for n in seq_lens):
            # Equal, bucket-aligned lengths (fixed-length data): a plain reshape, no gather.
            return cls(tokens=tokens, inverse=None, buckets=(
                BucketBatch(n=len(seq_lens), length=seq_lens[0], src=None, keep=None),))
        buckets, order = [], []
        for length in sorted(by_bucket, reverse=True):
            src, keep = [], []
            for i in by_bucket[length]:
                n, s0 = seq_lens[i], starts[i]
                keep.extend(range(len(src), len(src) + n))
                src.extend(range(s0, s0 + n))
                src.extend([tokens] * (length - n))  # the zero row
                order.extend(range(s0, s0 + n))
            padded = len(keep) != len(src)
            buckets.append(BucketBatch(
                n=len(by_bucket[length]), length=length,
                src=torch.tensor(src, dtype=torch.long, device=device),
                keep=torch.tensor(keep, dtype=torch.long, device=device) if padded else None))
        inverse = torch.empty(tokens, dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(tokens)
        return cls(tokens=tokens, buckets=tuple(buckets), inverse=inverse.to(device))

    def padded_square_sum(self) -> int:
        """sum over sequences of L^2: what the attention calls cost, tokens^2."""
        return sum(b.n * b.length * b.length for b in self.buckets)


def varlen_causal_attention(qkv: torch.Tensor, layout: VarlenLayout) -> torch.Tensor:
    """Causal attention inside each sequence; qkv [tokens, 3, heads, d] -> [tokens, heads, d]."""
    tokens, three, heads, d = qkv.shape
    if tokens != layout.tokens or three != 3:
        raise ValueError(f"qkv {tuple(qkv.shape)} does not match a layout of {layout.tokens} "
                         "tokens (expected [tokens, 3, heads, d])")
    padded = None
    outs = []
    for b in layout.buckets:
        if b.src is None:
            group = qkv
        else:
            if padded is None:  # one zero row that every padding slot points at
                padded = torch.cat([qkv, qkv.new_zeros(1, 3, heads, d)])
            group = padded.index_select(0, b.src)
        q, k, v = group.view(b.n, b.length, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [n, heads, L, d]
        o = o.transpose(1, 2).reshape(b.n * b.length, heads, d)
        outs.append(o if b.keep is None else o.index_select(0, b.keep))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out if layout.inverse is None else out.index_select(0, layout.inverse)
