"""The tiny GPT, split into pipeline stages.

Stage 0 holds the token and position embeddings, every stage holds its share
of transformer blocks, and the last stage holds the final layer norm and the
logit layer, whose weight is tied to the token embedding: as in Megatron, the
last stage keeps its own copy of the embedding weight, initialised equal and
kept equal by the embedding-grads all-reduce between the first and last stage.

Sequences are packed: a microbatch is one row of `tokens_per_microbatch`
tokens made of several sequences; attention runs causally inside each
sequence only, so its cost grows with sum(seq_len^2) — the source of
sequence-length imbalance (paper §5.3). It is batched variable-length
attention (workloads/varlen.py): sequences of similar length share one
`scaled_dot_product_attention` call over a padded [n, heads, L, d] batch, so
the per-call overhead is per length bucket, not per sequence, and the cost
follows sum(seq_len^2) as it does with FlashAttention's varlen kernels.

    stage = StageModel(model_cfg, stage=0, pp=2, n_blocks=2, seed=0)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from stragglerlab.scenarios.scenario import ModelConfig
from stragglerlab.workloads.varlen import VarlenLayout, varlen_causal_attention

IGNORE_INDEX = -100


class Block(nn.Module):
    """Pre-norm transformer block with causal attention inside each packed sequence."""

    def __init__(self, hidden: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.fc_out = nn.Linear(4 * hidden, hidden)

    def attention(self, x: torch.Tensor, layout: VarlenLayout) -> torch.Tensor:
        tokens, hidden = x.shape
        qkv = self.qkv(x).view(tokens, 3, self.n_heads, hidden // self.n_heads)
        return self.proj(varlen_causal_attention(qkv, layout).reshape(tokens, hidden))

    def forward(self, x: torch.Tensor, layout: VarlenLayout) -> torch.Tensor:
        x = x + self.attention(self.ln1(x), layout)
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class StageModel(nn.Module):
    """The part of the GPT that one pipeline stage runs."""

    def __init__(self, cfg: ModelConfig, stage: int, pp: int, n_blocks: int, seed: int) -> None:
        super().__init__()
        self.first, self.last = stage == 0, stage == pp - 1
        # The embedding is drawn from its own seed so that the last stage's tied
        # copy starts equal to the first stage's weight.
        emb_gen = torch.Generator().manual_seed(seed)
        embedding = torch.randn(cfg.vocab, cfg.hidden, generator=emb_gen) * 0.02
        torch.manual_seed(seed * 1009 + stage + 1)
        if self.first:
            self.tok_emb = nn.Parameter(embedding.clone())
            self.pos_emb = nn.Parameter(torch.randn(cfg.max_seq_len, cfg.hidden) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.hidden, cfg.n_heads) for _ in range(n_blocks))
        if self.last:
            self.ln_f = nn.LayerNorm(cfg.hidden)
            if not self.first:
                self.tied_emb = nn.Parameter(embedding.clone())
        for block in self.blocks:  # GPT-2 style scaled init of residual projections
            for lin in (block.proj, block.fc_out):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * max(1, n_blocks * pp)))

    @property
    def logit_weight(self) -> torch.Tensor:
        """The tied embedding weight used by the logit layer."""
        return self.tok_emb if self.first else self.tied_emb

    def shared_embedding(self) -> nn.Parameter | None:
        """The weight whose grads are all-reduced between first and last stage (pp > 1)."""
        if self.first and not self.last:
            return self.tok_emb
        if self.last and not self.first:
            return self.tied_emb
        return None

    def layernorm_params(self) -> list[nn.Parameter]:
        """Layer-norm weights and biases (all-reduced across tensor-parallel ranks)."""
        return [p for name, p in self.named_parameters() if ".ln" in name or name.startswith("ln")]

    def forward(self, x: torch.Tensor, positions: torch.Tensor, seq_lens: list[int],
                targets: torch.Tensor | None = None) -> torch.Tensor:
        """Stage 0 takes token ids, others the previous stage's hidden states.

        Returns the hidden states, or on the last stage the mean token loss.
        """
        if self.first:
            x = self.tok_emb[x] + self.pos_emb[positions]
        layout = VarlenLayout.build(seq_lens, x.device)  # once per microbatch, for every block
        for block in self.blocks:
            x = block(x, layout)
        if not self.last:
            return x
        logits = self.ln_f(x) @ self.logit_weight.t()
        return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
