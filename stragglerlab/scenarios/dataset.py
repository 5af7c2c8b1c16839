"""Synthetic token data packed into fixed-size microbatches of variable-length sequences.

Every rank can make any microbatch from (seed, step, dp_rank, microbatch), so
the first and last stage agree on tokens and targets without communicating.
Sequences follow a learnable rule (next = (3 * token + 7) mod vocab) so the
loss really falls. Lengths come from the configured distribution (fixed,
uniform or long-tailed lognormal); a long sequence costs ~length^2 in
attention, so sum(seq_len^2) is recorded per microbatch (paper Fig. 9).

    mb = make_microbatch(data_cfg, vocab=512, max_seq_len=256, seed=0, step=3, dp_rank=1, mb=0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglerlab.scenarios.scenario import DataConfig
from stragglerlab.scenarios.scenario_vocab import LengthDistribution

IGNORE_INDEX = -100


@dataclass
class Microbatch:
    """One packed microbatch."""

    tokens: np.ndarray
    """Token ids, [tokens_per_microbatch]."""
    targets: np.ndarray
    """Next-token targets, IGNORE_INDEX at each sequence's last token."""
    positions: np.ndarray
    """Position within its sequence, per token."""
    seq_lens: list[int]
    """Lengths of the packed sequences, summing to tokens_per_microbatch."""

    @property
    def seq_len_sq_sum(self) -> float:
        """sum(seq_len^2): the attention cost driver, tokens^2."""
        return float(sum(n * n for n in self.seq_lens))


def draw_lengths(cfg: DataConfig, max_seq_len: int, rng: np.random.Generator) -> list[int]:
    """Sequence lengths packed into one microbatch (the last one cut to fit)."""
    total, lengths = cfg.tokens_per_microbatch, []
    while total > 0:
        if cfg.length_distribution is LengthDistribution.FIXED:
            n = cfg.mean_seq_len
        elif cfg.length_distribution is LengthDistribution.UNIFORM:
            n = int(rng.integers(1, 2 * cfg.mean_seq_len))
        else:  # lognormal with the requested mean
            sigma = cfg.longtail_sigma
            n = int(round(rng.lognormal(np.log(cfg.mean_seq_len) - sigma**2 / 2, sigma)))
        n = int(min(max(n, 1), max_seq_len, total))
        lengths.append(n)
        total -= n
    return lengths


def make_microbatch(cfg: DataConfig, vocab: int, max_seq_len: int, seed: int, step: int,
                    dp_rank: int, mb: int) -> Microbatch:
    """The deterministic microbatch `mb` of `dp_rank` at `step`."""
    rng = np.random.default_rng([seed, step, dp_rank, mb])
    return _pack(cfg, vocab, draw_lengths(cfg, max_seq_len, rng), rng)


def rank_microbatches(cfg: DataConfig, vocab: int, max_seq_len: int, seed: int, step: int,
                      dp_rank: int, dp: int, n_mb: int) -> list[Microbatch]:
    """The microbatches of one DP rank at one step (rebalanced across DP when configured)."""
    if not cfg.rebalance_across_dp or dp == 1:
        return [make_microbatch(cfg, vocab, max_seq_len, seed, step, dp_rank, mb)
                for mb in range(n_mb)]
    # The same sequence lengths the unbalanced job draws, dealt differently.
    pool = [n for r in range(dp) for mb in range(n_mb)
            for n in draw_lengths(cfg, max_seq_len, np.random.default_rng([seed, step, r, mb]))]
    mine = deal_by_square_sum(pool, dp, n_mb * cfg.tokens_per_microbatch)[dp_rank]
    rng = np.random.default_rng([seed, step, dp_rank, 1_000_003])
    out, start = [], 0
    for _mb in range(n_mb):
        lengths, room = [], cfg.tokens_per_microbatch
        while room > 0:  # fill the microbatch, cutting a sequence at its boundary
            take = min(mine[start], room)
            lengths.append(take)
            mine[start] -= take
            room -= take
            start += mine[start] == 0
        out.append(_pack(cfg, vocab, lengths, rng))
    return out


def deal_by_square_sum(lengths: list[int], ranks: int, capacity: int) -> list[list[int]]:
    """Deal sequences to ranks, longest first, each to the rank with the smallest
    sum(len^2) that has room; a sequence no rank has room for is cut.

    Every rank ends with exactly `capacity` tokens when sum(lengths) == ranks * capacity.
    """
    pending = sorted(lengths, reverse=True)
    dealt: list[list[int]] = [[] for _ in range(ranks)]
    load, room = [0.0] * ranks, [capacity] * ranks
    while pending:
        n = pending.pop(0)
        fits = [r for r in range(ranks) if room[r] >= n]
        if fits:
            r = min(fits, key=lambda k: (load[k], k))
            part = n
        else:
            r = max(range(ranks), key=lambda k: (room[k], -k))
            if room[r] == 0:
                break
            part = room[r]
            pending.insert(0, n - part)
        dealt[r].append(part)
        load[r] += part * part
        room[r] -= part
    return dealt


def _pack(cfg: DataConfig, vocab: int, lengths: list[int], rng: np.random.Generator
          ) -> Microbatch:
    """Tokens, targets and positions of sequences with the given lengths."""
    tokens = np.empty(cfg.tokens_per_microbatch, dtype=np.int64)
    positions = np.empty_like(tokens)
    targets = np.empty_like(tokens)
    start = 0
    for n in lengths:
        seq = np.empty(n + 1, dtype=np.int64)
        seq[0] = rng.integers(vocab)
        for i in range(1, n + 1):
            seq[i] = (3 * seq[i - 1] + 7) % vocab
        tokens[start:start + n] = seq[:n]
        targets[start:start + n] = seq[1:]
        targets[start + n - 1] = IGNORE_INDEX  # no next token across a sequence boundary
        positions[start:start + n] = np.arange(n)
        start += n
    return Microbatch(tokens, targets, positions, lengths)
