"""Synthetic packed microbatches: determinism, lengths, the learnable rule, targets, positions."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.scenarios.dataset import IGNORE_INDEX, draw_lengths, make_microbatch
from stragglerlab.scenarios.scenario import DataConfig
from stragglerlab.scenarios.scenario_vocab import LengthDistribution

VOCAB, MAX_LEN = 512, 256


def cfg(dist: str = "fixed", tokens: int = 256, mean: int = 64, sigma: float = 1.0) -> DataConfig:
    return DataConfig(tokens_per_microbatch=tokens, length_distribution=LengthDistribution(dist),
                      mean_seq_len=mean, longtail_sigma=sigma)


def mb(c: DataConfig, seed=0, step=0, dp_rank=0, m=0, vocab=VOCAB, max_len=MAX_LEN):
    return make_microbatch(c, vocab=vocab, max_seq_len=max_len, seed=seed, step=step,
                           dp_rank=dp_rank, mb=m)


def same(a, b) -> bool:
    return (a.seq_lens == b.seq_lens and np.array_equal(a.tokens, b.tokens)
            and np.array_equal(a.targets, b.targets) and np.array_equal(a.positions, b.positions))


@pytest.mark.parametrize("dist", ["fixed", "uniform", "longtail"])
def test_deterministic_for_same_key(dist):
    c = cfg(dist)
    assert same(mb(c, 3, 5, 1, 2), mb(c, 3, 5, 1, 2))


@pytest.mark.parametrize("dist", ["fixed", "uniform", "longtail"])
def test_differs_for_other_keys(dist):
    c = cfg(dist)
    base = mb(c, 3, 5, 1, 2)
    for other in [mb(c, 4, 5, 1, 2), mb(c, 3, 6, 1, 2), mb(c, 3, 5, 0, 2), mb(c, 3, 5, 1, 3)]:
        assert not np.array_equal(base.tokens, other.tokens)


@pytest.mark.parametrize("dist", ["fixed", "uniform", "longtail"])
@pytest.mark.parametrize("tokens", [2, 100, 256, 1000])
def test_lengths_sum_to_tokens(dist, tokens):
    c = cfg(dist, tokens=tokens)
    for m in range(5):
        b = mb(c, m=m)
        assert sum(b.seq_lens) == tokens
        assert min(b.seq_lens) >= 1 and max(b.seq_lens) <= MAX_LEN
        assert b.tokens.shape == b.targets.shape == b.positions.shape == (tokens,)
        assert b.tokens.dtype == np.int64


def test_fixed_gives_equal_lengths():
    assert mb(cfg("fixed", tokens=256, mean=64)).seq_lens == [64] * 4
    assert mb(cfg("fixed", tokens=100, mean=30)).seq_lens == [30, 30, 30, 10]  # last cut to fit


def _lengths(dist: str, sigma: float = 1.0, n: int = 300, max_len: int = MAX_LEN) -> np.ndarray:
    c = cfg(dist, tokens=4096, mean=32, sigma=sigma)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n // 10):
        out += draw_lengths(c, max_len, rng)[:-1]  # drop the cut last one
    return np.array(out)


def test_longtail_has_heavier_tail_than_uniform():
    uni, lt = _lengths("uniform"), _lengths("longtail", sigma=1.0)
    assert abs(uni.mean() - 32) < 4 and abs(lt.mean() - 32) < 6
    assert uni.max() <= 63
    assert lt.max() / lt.mean() > 1.5 * uni.max() / uni.mean()
    assert np.percentile(lt, 99) > np.percentile(uni, 99)


def test_longtail_respects_max_seq_len():
    lengths = _lengths("longtail", sigma=2.0, max_len=48)
    assert lengths.max() == 48  # heavy tail is clipped, and reaches the cap
    b = make_microbatch(cfg("longtail", tokens=2048, mean=32, sigma=2.0), VOCAB, 48, 0, 0, 0, 0)
    assert max(b.seq_lens) <= 48 and sum(b.seq_lens) == 2048


def test_seq_len_sq_sum():
    for dist in ("fixed", "uniform", "longtail"):
        b = mb(cfg(dist), m=1)
        assert b.seq_len_sq_sum == float(sum(n * n for n in b.seq_lens))
    assert mb(cfg("fixed")).seq_len_sq_sum == 4 * 64.0**2


@pytest.mark.parametrize("dist", ["fixed", "uniform", "longtail"])
def test_targets_follow_rule_and_ignore_sequence_ends(dist):
    vocab = 97
    b = mb(cfg(dist), vocab=vocab, m=2)
    ends = np.cumsum(b.seq_lens) - 1
    is_end = np.zeros(len(b.tokens), dtype=bool)
    is_end[ends] = True
    assert (b.targets[is_end] == IGNORE_INDEX).all()
    inner = ~is_end
    assert np.array_equal(b.targets[inner], (3 * b.tokens[inner] + 7) % vocab)
    # Inside a sequence the next token is the target of the previous one.
    nxt = np.flatnonzero(inner)
    assert np.array_equal(b.tokens[nxt + 1], b.targets[nxt])
    assert ((b.tokens >= 0) & (b.tokens < vocab)).all()


@pytest.mark.parametrize("dist", ["fixed", "uniform", "longtail"])
def test_positions_restart_per_sequence(dist):
    b = mb(cfg(dist), m=4)
    expected = np.concatenate([np.arange(n) for n in b.seq_lens])
    assert np.array_equal(b.positions, expected)
    assert (b.positions < MAX_LEN).all()
