"""Attention cost vs sum(seq_len^2): batched varlen attention beside the per-sequence loop.

One transformer block (workloads/model.py), forward + backward, on packed
microbatches of the same token count whose sequences differ in length, so
sum(s^2) varies by up to `tokens` x. Two attention implementations: the
batched variable-length one the model uses (workloads/varlen.py) and the
per-sequence Python loop it replaced. For each, a least-squares fit
time = a + b * sum(s^2) over the microbatches, its R^2, and the ratio of the
slowest to the fastest microbatch beside the ratio of their sum(s^2). Ratios,
not absolute times, are the result: they survive a loaded machine far better.

    .venv/bin/python benchmarks/bench_attention.py                   # tokens 2048, hidden 64
    nice .venv/bin/python benchmarks/bench_attention.py --tokens 1024 --repeats 3 --json out.json

One intra-op thread (as every rank runs). Prints a table; --json writes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from stragglerlab.scenarios.scenario import DataConfig
from stragglerlab.scenarios.scenario_vocab import LengthDistribution
from stragglerlab.workloads.model import Block
from stragglerlab.workloads.varlen import VarlenLayout


class LoopBlock(Block):
    """The block with the old per-sequence attention loop (for comparison only)."""

    def attention(self, x, layout):
        tokens, hidden = x.shape
        q, k, v = self.qkv(x).view(tokens, 3, self.n_heads, hidden // self.n_heads).unbind(1)
        outs, start = [], 0
        for n in self._lens:
            sl = slice(start, start + n)
            o = F.scaled_dot_product_attention(q[sl].transpose(0, 1), k[sl].transpose(0, 1),
                                               v[sl].transpose(0, 1), is_causal=True)
            outs.append(o.transpose(0, 1).reshape(n, hidden))
            start += n
        return self.proj(torch.cat(outs))


def length_sets(tokens: int, seed: int) -> list[list[int]]:
    """Equal splits (one sequence up to tokens/16 each) and long-tailed draws."""
    from stragglerlab.scenarios.dataset import draw_lengths

    sets = [[tokens // k] * k for k in (1, 2, 4, 8, 16) if tokens % k == 0]
    rng = np.random.default_rng(seed)
    for sigma in (0.8, 1.3):
        cfg = DataConfig(tokens_per_microbatch=tokens, mean_seq_len=max(1, tokens // 8),
                         length_distribution=LengthDistribution.LONGTAIL, longtail_sigma=sigma)
        sets += [draw_lengths(cfg, tokens, rng) for _ in range(3)]
    return sets


def time_block(block: Block, lens: list[int], hidden: int, repeats: int) -> float:
    """Median seconds of forward + backward of one block on one packed microbatch."""
    x = torch.randn(sum(lens), hidden, requires_grad=True)
    block._lens = lens  # LoopBlock reads it; Block ignores it
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        layout = VarlenLayout.build(lens)
        block(x, layout).sum().backward()
        if i:  # the first call warms allocator and kernels
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(a, b, R^2) of ys = a + b * xs."""
    b, a = np.polyfit(xs, ys, 1)
    pred = a + b * np.asarray(xs)
    ss_res = float(np.sum((np.asarray(ys) - pred) ** 2))
    ss_tot = float(np.sum((np.asarray(ys) - np.mean(ys)) ** 2)) or 1.0
    return float(a), float(b), 1.0 - ss_res / ss_tot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per packed microbatch")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per microbatch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    sets = length_sets(args.tokens, args.seed)
    sq = [float(sum(n * n for n in lens)) for lens in sets]
    out: dict = {"tokens": args.tokens, "hidden": args.hidden, "heads": args.heads,
                 "microbatches": [{"seqs": len(s), "seq_len_sq_sum": q} for s, q in zip(sets, sq)]}
    print(f"{len(sets)} microbatches of {args.tokens} tokens; sum(s^2) from {min(sq):.3g} to "
          f"{max(sq):.3g} ({max(sq) / min(sq):.0f}x); hidden {args.hidden}, heads {args.heads}")
    print(f"{'attention':<10} {'t(min sq) ms':>12} {'t(max sq) ms':>12} {'time ratio':>10} "
          f"{'R^2':>6} {'attn share at max':>17}")
    for name, cls in (("varlen", Block), ("loop", LoopBlock)):
        block = cls(args.hidden, args.heads)
        ts = [time_block(block, lens, args.hidden, args.repeats) for lens in sets]
        a, b, r2 = fit(sq, ts)
        lo, hi = ts[int(np.argmin(sq))], ts[int(np.argmax(sq))]
        share = b * max(sq) / (a + b * max(sq)) if a + b * max(sq) > 0 else float("nan")
        out[name] = {"times_s": ts, "fit_a_s": a, "fit_b_s_per_tok2": b, "r2": r2,
                     "time_ratio_max_over_min_sq": hi / lo}
        print(f"{name:<10} {1e3 * lo:12.2f} {1e3 * hi:12.2f} {hi / lo:10.2f} {r2:6.3f} "
              f"{share:17.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
