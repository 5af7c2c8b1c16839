"""Fig. 10: sequence-length histogram and CDF (log x) of a seq-imbalance run.

Sequence lengths are not in the trace, but every microbatch is a pure
function of (data config, vocab, max_seq_len, seed, step, dp_rank, mb)
(`stragglerlab/scenarios/dataset.py`, numpy only), so they are regenerated from the scenario
recorded in run.json for the trace's steps. The regenerated sum(seq_len^2) of
every microbatch is checked against the trace's `seq_len_sq_sum`; the result
of the check is part of `ours`.

    from stragglerlab.figures.fig10_seq_len_hist import regenerate_lengths, check_against_trace
    lengths, per_mb = regenerate_lengths(run.record["scenario"], steps=[1, 2, 3])
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.figures.data import FigureData
from stragglerlab.figures.fig09_mb_time_vs_seqsq import variable_length_runs
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note
from stragglerlab.figures.trace_common import trace_of
from stragglerlab.scenarios.dataset import rank_microbatches
from stragglerlab.scenarios.scenario import DataConfig
from stragglerlab.scenarios.scenario_vocab import LengthDistribution

NAME = "fig10_seq_len_hist"
TITLE = "Fig. 10: sequence-length histogram and CDF"
PAPER = "long-tailed: most sequences short, a few very long (histogram + CDF, log x)"
N_BINS = 40
"""Log-spaced histogram bins."""
INPUTS = ("runs", "traces")
"""Run-folder files this figure reads (figures/registry.py)."""


def data_config(scenario: dict) -> DataConfig:
    """The DataConfig recorded in run.json's scenario (after the faults shaped it)."""
    raw = dict(scenario["data"])
    raw["length_distribution"] = LengthDistribution(raw["length_distribution"])
    return DataConfig(**raw)


def regenerate_lengths(scenario: dict, steps) -> tuple[np.ndarray, pd.DataFrame]:
    """(every sequence length, per-microbatch table) of the given steps, all DP ranks.

    The table has columns step, dp_rank, mb_id, seq_len_sq_sum (tokens^2), n_seqs.
    """
    cfg = data_config(scenario)
    model, par = scenario["model"], scenario["parallel"]
    seed = int(scenario["run"]["seed"])
    lengths: list[np.ndarray] = []
    rows: list[tuple[int, int, int, float, int]] = []
    for step in steps:  # one call per (step, rank): microbatches are drawn per rank
        for dp_rank in range(int(par["dp"])):
            mbs = rank_microbatches(cfg, int(model["vocab"]), int(model["max_seq_len"]), seed,
                                    int(step), dp_rank, int(par["dp"]), int(par["microbatches"]))
            for mb_id, mb in enumerate(mbs):
                seq = np.asarray(mb.seq_lens, dtype=np.int64)
                lengths.append(seq)
                rows.append((int(step), dp_rank, mb_id, float((seq**2).sum()), len(seq)))
    table = pd.DataFrame(rows, columns=["step", "dp_rank", "mb_id", "seq_len_sq_sum", "n_seqs"])
    flat = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return flat, table


def check_against_trace(df: pd.DataFrame, table: pd.DataFrame) -> tuple[int, int]:
    """(microbatches compared, mismatches) of regenerated vs traced sum(seq_len^2).

    Compared on the first stage's forward-compute ops (which carry the column).
    """
    fwd = df[(df["optype"] == "forward-compute") & (df["stage"] == df["stage"].min())]
    traced = fwd.set_index(["step", "dp_rank", "mb_id"])["seq_len_sq_sum"]
    regen = table.set_index(["step", "dp_rank", "mb_id"])["seq_len_sq_sum"]
    both = pd.concat([traced.rename("traced"), regen.rename("regen")], axis=1, join="inner")
    bad = ~np.isclose(both["traced"], both["regen"], rtol=1e-9, atol=0.0)
    return len(both), int(bad.sum())


def length_stats(lengths: np.ndarray) -> dict:
    """Count, mean, quantiles, max and the token share of the longest 10% of sequences."""
    s = np.sort(np.asarray(lengths, dtype=float))
    top = s[int(np.floor(0.9 * len(s))):]
    return {
        "n_sequences": len(s),
        "mean_len": round(float(s.mean()), 2),
        "median_len": float(np.median(s)),
        "p90_len": float(np.quantile(s, 0.9)),
        "p99_len": float(np.quantile(s, 0.99)),
        "max_len": float(s[-1]),
        "token_share_longest_10pct": round(float(top.sum() / s.sum()), 4),
    }


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Histogram + CDF of the first variable-length run's regenerated sequence lengths."""
    runs = variable_length_runs(data)
    if not runs:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "a run with variable sequence lengths (seq-imbalance)")
    run = runs[0]
    df = trace_of(run)
    scenario = run.record["scenario"]
    lengths, table = regenerate_lengths(scenario, sorted(df["step"].unique()))
    checked, mismatched = check_against_trace(df, table)
    ours = {"run": run.label, **length_stats(lengths),
            "length_distribution": scenario["data"]["length_distribution"],
            "requested_mean_seq_len": scenario["data"]["mean_seq_len"],
            "longtail_sigma": scenario["data"]["longtail_sigma"],
            "max_seq_len": scenario["model"]["max_seq_len"],
            "microbatches_checked": checked, "microbatches_mismatched": mismatched,
            "regenerated_matches_trace": bool(checked > 0 and mismatched == 0)}
    paths = _draw(lengths, ours, out_dir)
    check = ("the regenerated sum(s^2) equals the trace's for all "
             f"{checked} microbatches" if ours["regenerated_matches_trace"] else
             f"WARNING: {mismatched} of {checked} microbatches differ from the trace")
    note = (f"{run.label}: median length {ours['median_len']:.0f}, P99 "
            f"{ours['p99_len']:.0f}, max {ours['max_len']:.0f} tokens; the longest 10% of "
            f"sequences hold {100 * ours['token_share_longest_10pct']:.0f}% of the tokens. "
            f"Long-tailed like the paper's, but bounded by max_seq_len "
            f"{ours['max_seq_len']} and cut at microbatch boundaries; {check}.")
    return FigureResult(name=NAME, paths=paths, source=f"testbed run {run.label} "
                        "(lengths regenerated from run.json)", paper=PAPER, ours=ours, note=note)


def _draw(lengths: np.ndarray, ours: dict, out_dir: Path) -> list[Path]:
    s = np.sort(lengths.astype(float))
    with figure_style():
        fig = new_figure(4.2, 3.0)
        ax = fig.add_subplot()
        bins = np.geomspace(max(1.0, s[0]), s[-1] + 1, N_BINS + 1)
        ax.hist(s, bins=bins, color="#4C72B0", alpha=0.75, label="sequences (count)")
        ax.set_xscale("log")
        ax.set_xlabel("sequence length (tokens, log scale)")
        ax.set_ylabel("sequences")
        cdf = ax.twinx()
        cdf.spines["right"].set_visible(True)
        frac = np.arange(1, len(s) + 1) / len(s)
        cdf.step(s, frac, where="post", color="#C44E52", lw=1.3, label="CDF of sequences")
        cdf.step(s, np.cumsum(s) / s.sum(), where="post", color="#C44E52", lw=1.0, ls="--",
                 label="CDF of tokens")
        cdf.set_ylim(0, 1.02)
        cdf.set_ylabel("cumulative fraction")
        handles = ax.get_legend_handles_labels()[0] + cdf.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="upper left", frameon=False)
        ax.set_title(f"{ours['run']}: {ours['n_sequences']} sequences, "
                     f"max_seq_len {ours['max_seq_len']}", fontsize=8, loc="left")
        source_note(fig, f"testbed run {ours['run']}, lengths regenerated from run.json")
        return save_figure(fig, Path(out_dir) / NAME, pdf=True)
