"""Fig. 13: GC straggler timeline: a pause on one rank delays every rank's step.

From a `gc-pauses` run (automatic Python GC, collections at random points on
each rank) and, beside it when given, a `gc-planned` run (the paper's
mitigation: automatic GC off, every rank collects at the same point). Per run,
top: one step (the one with the longest pause) as per-rank lanes of op bars
with the GC pauses in red; bottom: every traced step's time (line) and each
rank's GC pause time in that step (bars). Pauses come from the per-pause
records `<run>/gc/rank<r>.jsonl` (times put on the trace clock with run.json
`trace.clock_origin_monotonic_s`); without them, from the trace's
`gc_pause_s` column.

    from stragglerlab.figures.fig13_gc_timeline import build, gc_pauses, gc_numbers
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from stragglerlab.analysis.steps import step_times
from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note
from stragglerlab.figures.trace_common import (
    COMM_COLOR,
    COMPUTE_COLORS,
    op_colors,
    runs_with_fault,
    scenario_section,
    trace_of,
)

NAME = "fig13_gc_timeline"
TITLE = "Fig. 13: GC straggler timeline"
PAPER = ("GC pauses of 100s of ms on one rank stall all ranks; planned synchronized GC "
         "+12.6% throughput at 128 DP ranks (§5.4)")
BIG_PAUSE_S = 0.02
"""A pause from this long (s) counts as a straggling GC pause (small gen-0 pauses do not)."""
MIN_DRAWN_PAUSE_S = 1e-3
"""Shorter pauses are not drawn on the timeline (invisible at its scale)."""
GC_COLOR = "#C44E52"
PAUSE_COLUMNS = ["rank", "step", "start_s", "duration_s"]
INPUTS = ("runs", "traces")
"""Run-folder files this figure reads (figures/registry.py)."""


def pick_runs(data: FigureData) -> dict[str, object]:
    """{'gc-pauses': run, 'gc-planned': run} for the runs present (first of each)."""
    def planned(r) -> bool:
        return int(scenario_section(r, "run").get("planned_gc_every", 0) or 0) > 0

    picked = {}
    auto = runs_with_fault(data, "gc-pauses", lambda r: not planned(r))
    plan = runs_with_fault(data, "gc-pauses", planned)
    if auto:
        picked["gc-pauses"] = auto[0]
    if plan:
        picked["gc-planned"] = plan[0]
    return picked


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a run killed mid-write leaves a partial last line
            continue
    return rows


def gc_pauses(run, df: pd.DataFrame) -> pd.DataFrame:
    """Every GC pause of the traced steps: rank, step, start_s (trace clock, NaN if
    unknown), duration_s."""
    origin = ((run.record or {}).get("trace") or {}).get("clock_origin_monotonic_s")
    files = sorted((Path(run.path) / "gc").glob("rank*.jsonl"))
    steps = set(df["step"].unique().tolist())
    if files and origin is not None:
        frames = []
        for f in files:  # one file per rank
            rows = pd.DataFrame(_read_jsonl(f))
            if rows.empty:
                continue
            frames.append(pd.DataFrame({
                "rank": int(f.stem.removeprefix("rank")), "step": rows["step"].astype(int),
                "start_s": rows["start"].astype(float) - float(origin),
                "duration_s": rows["duration_s"].astype(float)}))
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=PAUSE_COLUMNS)
        return out[out["step"].isin(steps)].reset_index(drop=True)
    if "gc_pause_s" not in df:
        return pd.DataFrame(columns=PAUSE_COLUMNS)
    # Fallback: the trace column. Ops of one rank overlap (P2P beside compute), so take
    # the pause of each rank's compute-like ops only, which never overlap each other.
    comp = df[df["optype"].isin([*COMPUTE_COLORS, "optimizer", "gc"]) & (df["gc_pause_s"] > 0)]
    return pd.DataFrame({"rank": comp["rank"], "step": comp["step"],
                         "start_s": comp["start_ts"], "duration_s": comp["gc_pause_s"]}
                        ).reset_index(drop=True)


def gc_numbers(pauses: pd.DataFrame, steps: pd.Series, world: int) -> dict:
    """Pause statistics and the step time of steps with and without a long pause."""
    big = pauses[pauses["duration_s"] >= BIG_PAUSE_S]
    hit = steps.index.isin(big["step"].unique())
    ranks_hit = big.groupby("step")["rank"].nunique()
    with_p, without = steps[hit], steps[~hit]
    out = {
        "steps": len(steps),
        "long_pauses": len(big),
        "long_pause_ms_mean": round(1e3 * float(big["duration_s"].mean()), 1) if len(big)
        else None,
        "long_pause_ms_max": round(1e3 * float(big["duration_s"].max()), 1) if len(big)
        else None,
        "steps_with_long_pause": int(hit.sum()),
        "ranks_pausing_per_hit_step": round(float(ranks_hit.mean()), 2) if len(big) else None,
        "world_size": world,
        "step_time_s_mean": round(float(steps.mean()), 4),
        "step_time_s_median_with_pause": round(float(with_p.median()), 4) if len(with_p)
        else None,
        "step_time_s_median_without_pause": round(float(without.median()), 4) if len(without)
        else None,
    }
    if len(with_p) and len(without):
        out["step_delay_ms"] = round(1e3 * float(with_p.median() - without.median()), 1)
    return out


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw the GC timeline of the gc-pauses run (and the gc-planned run beside it)."""
    picked = pick_runs(data)
    if not picked:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "a gc-pauses run (and optionally gc-planned)")
    panels, ours = [], {}
    for key, run in picked.items():
        df = trace_of(run)
        pauses, steps = gc_pauses(run, df), step_times(df)
        ours[key] = {"run": run.label, **gc_numbers(pauses, steps, run.meta.world_size)}
        panels.append((key, run, df, pauses, steps))
    if len(picked) == 2:
        # Measured step times (run.json), as the mitigation table computes its gain.
        auto, plan = (picked[k].mean_step_time_s() for k in ("gc-pauses", "gc-planned"))
        if auto and plan:
            ours["planned_gc_throughput_gain_pct"] = round(100.0 * (auto / plan - 1.0), 2)
    paths = _draw(panels, out_dir)
    return FigureResult(name=NAME, paths=paths, source="testbed runs " + ", ".join(
        r.label for r in picked.values()), paper=PAPER, ours=ours, note=_note(ours))


def _note(ours: dict) -> str:
    auto = ours.get("gc-pauses")
    parts = []
    if auto and auto["long_pauses"]:
        parts.append(
            f"{auto['run']}: {auto['long_pauses']} GC pauses >= {1e3 * BIG_PAUSE_S:.0f} ms "
            f"(mean {auto['long_pause_ms_mean']} ms, paper: 100s of ms) on "
            f"{auto['ranks_pausing_per_hit_step']} of {auto['world_size']} ranks per affected "
            f"step; those steps take {auto.get('step_delay_ms', 'n/a')} ms longer (median), "
            "so one rank's pause delays every rank's step.")
    elif auto:
        parts.append(f"{auto['run']}: no GC pause >= {1e3 * BIG_PAUSE_S:.0f} ms was traced.")
    if "planned_gc_throughput_gain_pct" in ours:
        gain = ours["planned_gc_throughput_gain_pct"]
        parts.append(
            f"Planned, synchronized GC changes throughput by {gain:+.1f}% (paper: +12.6% at "
            f"128 DP ranks): with it all {auto['world_size']} ranks pause together at one "
            "point instead of each rank's pause stalling the others at different times.")
        if gain <= 0:
            parts.append("The testbed shows no gain: with so few ranks unsynchronized pauses "
                         "rarely stack up, while planned GC collects on every rank.")
    elif "gc-planned" not in ours:
        parts.append("No gc-planned run given: the mitigation is not compared.")
    return " ".join(parts)


def _draw(panels: list, out_dir: Path) -> list[Path]:
    n = len(panels)
    world = max(int(p[1].meta.world_size) for p in panels)
    with figure_style():
        fig = new_figure(4.6 * n, 1.5 + 0.28 * world + 2.0)
        axes = fig.subplots(2, n, squeeze=False,
                            gridspec_kw={"height_ratios": [0.28 * world + 0.6, 2.0]})
        for col, (key, run, df, pauses, steps) in enumerate(panels):
            _draw_step(axes[0, col], key, run, df, pauses)
            _draw_steps(axes[1, col], run, pauses, steps)
        fig.legend(handles=[
            Patch(color=COMPUTE_COLORS["forward-compute"], label="forward"),
            Patch(color=COMPUTE_COLORS["backward-compute"], label="backward"),
            Patch(color=COMM_COLOR, label="comm / optimizer"),
            Patch(color=GC_COLOR, label="GC pause"),
        ], loc="outside upper center", ncol=4, frameon=False)
        source_note(fig, "testbed runs " + ", ".join(p[1].label for p in panels)
                    + "; pauses from gc/rank<r>.jsonl")
        return save_figure(fig, Path(out_dir) / NAME, pdf=True)


def _draw_step(ax, key: str, run, df: pd.DataFrame, pauses: pd.DataFrame) -> None:
    """One step (the longest pause) as per-rank lanes with the GC pauses in red."""
    per_step = pauses.groupby("step")["duration_s"].max()
    step = int(per_step.idxmax()) if len(per_step) else int(df["step"].min())
    ops = df[df["step"] == step]
    t0 = float(ops["start_ts"].min())
    ax.barh(ops["rank"], ops["duration"], left=ops["start_ts"] - t0, height=0.6,
            color=op_colors(ops["optype"]), linewidth=0)
    shown = pauses[(pauses["step"] == step) & (pauses["duration_s"] >= MIN_DRAWN_PAUSE_S)
                   & pauses["start_s"].notna()]
    ax.barh(shown["rank"], shown["duration_s"], left=shown["start_s"] - t0, height=0.9,
            color=GC_COLOR, alpha=0.85, linewidth=0)
    end = float((ops["start_ts"] + ops["duration"]).max()) - t0
    ax.axvline(end, color="0.3", lw=0.8, ls="--")
    world = int(run.meta.world_size)
    dp = int(run.meta.dp_size)
    ax.set_yticks(range(world), [f"r{r} (DP {r % dp}, PP {r // dp})" for r in range(world)])
    ax.set_ylim(world - 0.4, -0.6)
    ax.set_xlim(left=0)
    ax.set_xlabel(f"time in step {step} (s)")
    ax.set_title(f"{key}: {run.label}", fontsize=8, loc="left")


def _draw_steps(ax, run, pauses: pd.DataFrame, steps: pd.Series) -> None:
    """Step time per step (line) and each rank's GC pause time in the step (bars)."""
    world = int(run.meta.world_size)
    per = pauses.groupby(["step", "rank"])["duration_s"].sum().unstack(fill_value=0.0)
    per = per.reindex(index=steps.index, columns=range(world), fill_value=0.0)
    width = 0.8 / world
    x = np.asarray(steps.index, dtype=float)
    for r in range(world):  # one bar series per rank (a handful), not per row
        ax.bar(x - 0.4 + width * (r + 0.5), per[r].to_numpy(), width=width,
               color=GC_COLOR, alpha=0.35 + 0.65 * (r + 1) / world, linewidth=0)
    ax.plot(x, steps.to_numpy(), color="black", lw=1.0, marker=".", ms=3, label="step time")
    top = max(float(steps.max()), float(per.to_numpy().max(initial=0.0)))
    ax.set_ylim(0, 1.3 * top)
    ax.set_xlabel("training step")
    ax.set_ylabel("seconds")
    ax.legend(handles=[ax.lines[0], Patch(color=GC_COLOR, alpha=0.7,
                                          label="GC pause, one bar per rank")],
              loc="upper center", ncol=2, frameon=False)
