"""The tiny pipeline-split GPT: stage shapes, tied embeddings, packed attention, learning."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stragglerlab.scenarios.dataset import make_microbatch  # noqa: E402
from stragglerlab.scenarios.scenario import DataConfig, ModelConfig  # noqa: E402
from stragglerlab.scenarios.scenario_vocab import LengthDistribution  # noqa: E402
from stragglerlab.workloads.model import StageModel  # noqa: E402

CFG = ModelConfig(n_layers=4, hidden=16, n_heads=2, vocab=32, max_seq_len=32)
DATA = DataConfig(tokens_per_microbatch=48, length_distribution=LengthDistribution.UNIFORM,
                  mean_seq_len=12)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread is ~20x faster than several on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def batch(step: int = 0, mb: int = 0, data: DataConfig = DATA, cfg: ModelConfig = CFG):
    b = make_microbatch(data, cfg.vocab, cfg.max_seq_len, seed=0, step=step, dp_rank=0, mb=mb)
    return (torch.from_numpy(b.tokens), torch.from_numpy(b.positions), b.seq_lens,
            torch.from_numpy(b.targets))


def pipeline(pp: int, layers: list[int], cfg: ModelConfig = CFG, seed: int = 0):
    return [StageModel(cfg, stage=s, pp=pp, n_blocks=n, seed=seed) for s, n in enumerate(layers)]


@pytest.mark.parametrize("layers", [[1, 3], [2, 1, 1], [1, 1, 1, 1]])
def test_stage_outputs(layers):
    stages = pipeline(len(layers), layers)
    tokens, positions, seq_lens, targets = batch()
    x = tokens
    with torch.no_grad():
        for i, stage in enumerate(stages):
            assert len(stage.blocks) == layers[i]
            assert stage.first == (i == 0) and stage.last == (i == len(layers) - 1)
            x = stage(x, positions, seq_lens, targets if stage.last else None)
            if not stage.last:
                assert x.shape == (DATA.tokens_per_microbatch, CFG.hidden)
                assert x.dtype == torch.float32
    assert x.shape == () and torch.isfinite(x)
    assert 2.0 < x.item() < 5.0  # ~ln(vocab)=3.47 at init


def test_tied_embedding_copy_starts_equal_pp2():
    first, last = pipeline(2, [2, 2], seed=3)
    assert not hasattr(first, "tied_emb") and not hasattr(last, "tok_emb")
    assert torch.equal(first.tok_emb, last.tied_emb)
    assert first.tok_emb.data_ptr() != last.tied_emb.data_ptr()  # a copy, not shared storage
    assert last.logit_weight is last.tied_emb
    assert first.shared_embedding() is first.tok_emb
    assert last.shared_embedding() is last.tied_emb
    other_seed = StageModel(CFG, stage=0, pp=2, n_blocks=2, seed=4)
    assert not torch.equal(first.tok_emb, other_seed.tok_emb)


def test_pp1_holds_both_ends_and_ties_logits_to_embedding():
    (model,) = pipeline(1, [4])
    assert model.first and model.last
    assert model.logit_weight is model.tok_emb
    assert not hasattr(model, "tied_emb")
    assert model.shared_embedding() is None
    names = {n for n, _ in model.named_parameters()}
    assert {"tok_emb", "pos_emb", "ln_f.weight", "ln_f.bias"} <= names
    ln = model.layernorm_params()
    assert len(ln) == 2 * (2 * 4) + 2  # ln1 + ln2 (weight, bias) per block, plus ln_f


def test_middle_stage_has_no_embeddings():
    _first, mid, _last = pipeline(3, [1, 2, 1])
    assert not hasattr(mid, "tok_emb") and not hasattr(mid, "ln_f")
    assert mid.shared_embedding() is None
    assert len(mid.blocks) == 2


def test_packed_attention_does_not_cross_sequences():
    first, _last = pipeline(2, [2, 2])
    data = DataConfig(tokens_per_microbatch=40, length_distribution=LengthDistribution.FIXED,
                      mean_seq_len=20)
    tokens, positions, seq_lens, _ = batch(data=data)
    assert seq_lens == [20, 20]
    changed = tokens.clone()
    changed[25:] = (changed[25:] + 5) % CFG.vocab  # second sequence only, from its 6th token
    with torch.no_grad():
        a = first(tokens, positions, seq_lens)
        b = first(changed, positions, seq_lens)
    torch.testing.assert_close(a[:20], b[:20], rtol=0, atol=1e-6)  # first sequence untouched
    torch.testing.assert_close(a[20:25], b[20:25], rtol=0, atol=1e-6)  # causal: earlier ones too
    assert (a[25:] - b[25:]).abs().amax(dim=1).min() > 1e-4  # every changed position differs
    # Without the boundary the first sequence's tokens would see nothing of the second anyway
    # (causal); check the reverse: changing the first sequence leaves the second unchanged.
    changed = tokens.clone()
    changed[:20] = (changed[:20] + 3) % CFG.vocab
    with torch.no_grad():
        c = first(changed, positions, seq_lens)
    torch.testing.assert_close(a[20:], c[20:], rtol=0, atol=1e-6)
    assert (a[:20] - c[:20]).abs().max() > 1e-4


def test_seed_reproducible_init():
    a = StageModel(CFG, stage=1, pp=2, n_blocks=2, seed=5)
    b = StageModel(CFG, stage=1, pp=2, n_blocks=2, seed=5)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


def test_adam_reduces_loss_pp1():
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=1, hidden=32, n_heads=2, vocab=32, max_seq_len=32)
    data = DataConfig(tokens_per_microbatch=64, length_distribution=LengthDistribution.FIXED,
                      mean_seq_len=16)
    (model,) = pipeline(1, [1], cfg=cfg)
    held_out = batch(step=10_000, data=data, cfg=cfg)

    def eval_loss() -> float:
        with torch.no_grad():
            return model(*held_out).item()

    before = eval_loss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(100):
        loss = model(*batch(step=step, data=data, cfg=cfg))
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = eval_loss()
    assert before > 3.0 and after < 0.3 * before, (before, after)  # ~3.5 -> ~0.14
