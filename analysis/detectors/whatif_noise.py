"""The `whatif` detector against the noise floor: measuring it, and raising thresholds to it.

Every rule of the detector compares one statistic with one threshold field of
`WhatIfDetectorConfig` (a link's cost as a share of the step, a device's compute
over its peers, ...). How high that statistic goes on clean runs is measured
with the rule itself: on a clean run, the detector is run again with that one
threshold taken away (`RELAXED`, from each rule's declared `Threshold.noise`), the other
tests of the rule left as they are, and the highest value the statistic takes among what
it then reports is the run's reading. Windows, peers and references are the rule's own,
so the floor is read over the same window length the rule uses. A family's floor is the
highest reading over its clean runs (`measure_floor`).

The online mode and the live monitor diagnose a sliding window of the latest steps
(`online_window_steps`, the monitor's `--window-steps`), and a short window is noisier
than a whole run (one slow burst weighs more in 8 steps than in 30). So the floor is
read over the whole run and, per window length in `WINDOW_STEPS`, over every window of
that length an online replay would diagnose on the same run (`online`, the highest over
all windows). A window diagnosis is held to the online floor of its window length, a
whole run to the offline one.

When a run is diagnosed, each threshold is raised to just above its family's
floor where the floor is higher (`floored_config`): a finding must stand out of
the noise measured for its layout. Nothing is tuned here: a threshold that
clean noise never reaches stays as it was set.

    reading = WhatIfDetector().clean_reading(run)      # a clean run's statistics
    floor = measure_floor({LayoutFamily.DP_PP: [reading, ...]})
    cfg, report = floored_config(config, floor, run.meta)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from stragglerlab.analysis.detectors.base import Finding, Run
from stragglerlab.analysis.detectors.whatif_arbitration import declared_thresholds
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_rules import NoiseStatistic
from stragglerlab.method.noise_floor import FamilyFloor, NoiseFloor, Spread
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.trace.meta import JobMeta, LayoutFamily

WINDOW_STEPS = (4, 6, 8, 12)
"""Window lengths the online floor is read over: short monitor windows (4, 6), the
monitor's default `--window-steps` (8) and the detector's `online_window_steps` (12)."""

ABOVE = 1e-6
"""A raised threshold sits this far (relative) above the floor: a finding must exceed it."""


def noise_statistics() -> dict[str, tuple[NoiseStatistic, ...]]:
    """Threshold field -> how the noise floor reads its statistic: every rule's declared
    `Threshold.noise` (`whatif_rules/`), in the order of the precedence table as it stands
    (a rule added to it is read too)."""
    return {name: t.noise for name, (_, t) in declared_thresholds().items() if t.noise}


def relaxed_thresholds() -> dict[str, NoiseStatistic]:
    """Threshold field -> how it is taken away (its first statistic's `off`)."""
    return {name: stats[0] for name, stats in noise_statistics().items()}


def per_step_statistics() -> tuple[str, ...]:
    """The statistics declared `per_step` (`PER_STEP`)."""
    return tuple(name for name, (_, t) in declared_thresholds().items() if t.per_step)


NOISE = noise_statistics()
"""`noise_statistics` of the shipped rules."""

RELAXED: dict[str, NoiseStatistic] = relaxed_thresholds()
"""`relaxed_thresholds` of the shipped rules."""

PER_STEP = per_step_statistics()
"""Statistics that are a time over the step's (a rank's comm excess, a link's cost, GC
pauses; each declared `per_step`). Their clean noise is host jitter, about the same time
per step however long the step at one layout (measured: a rank's top comm excess 15-42 ms
per step in clean DP 2 x PP 2 runs of 0.3 s and of 0.9 s steps, that is 0.05-0.13 and
0.02-0.03 of the step), though not across layouts (DP 4 x PP 4 on 2 cores, of far longer
steps, read 0.5 s). So the floor keeps them in seconds per step per layout too and holds
a run of a measured layout to that over its own mean step time
(`FamilyFloor.per_step_s`)."""


def _values(detail: dict, relaxed: NoiseStatistic) -> list[float]:
    """The statistic a finding's detail holds, as numbers (a per-worker dict: each)."""
    got = []
    for key in relaxed.keys:
        v = detail.get(key)
        vals = list(v.values()) if isinstance(v, dict) else [v]
        got.append([float(x) for x in vals if isinstance(x, (int, float))])
    if relaxed.both:
        return [min(v[0] for v in got)] if all(got) else []
    return [x for v in got for x in v]


def reading(findings: list[Finding], name: str) -> float | None:
    """The highest value of threshold `name`'s statistic among findings, None without one."""
    vals = [x for stat in noise_statistics()[name]
            for f in findings for x in _values(f.detail, stat)]
    return max(vals) if vals else None


def floored_config(config: WhatIfDetectorConfig, noise_floor: NoiseFloor | None,
                   meta: JobMeta, window_steps: int | None = None,
                   step_s: float | None = None) -> tuple[WhatIfDetectorConfig, dict]:
    """`config` with every threshold the run's family floor reaches raised just above it,
    and the report of that floor: {family, measured, source, n_runs, layouts,
    clean_job_slowdown, window, raised: {field: {configured, floor, used}}, below_floor: []}.

    window_steps: the diagnosis is of a sliding window of that many steps (online mode,
    the monitor); the family's online floor applies when it was read over windows that
    long, else the whole-run floor (`window` says which: "online" or "run").

    step_s: the diagnosed run's mean step time; a share-of-the-step statistic is then held
    to the floor's seconds per step on the run's own layout over it, where that is the
    higher (`PER_STEP`; a layout the floor has no clean run of: shares only)."""
    family = LayoutFamily.of(meta.dp_size, meta.pp_size)
    floor = noise_floor.family(family) if noise_floor is not None else None
    report: dict = {"family": family.value, "measured": floor is not None,
                    "source": noise_floor.source if noise_floor is not None else None,
                    "raised": {}, "below_floor": []}
    if floor is None:
        return config, report
    report.update(n_runs=floor.n_runs, layouts=list(floor.layouts),
                  clean_job_slowdown=floor.job_slowdown and floor.job_slowdown.to_json())
    layout = f"dp{meta.dp_size}-pp{meta.pp_size}"
    if layout in floor.runs_by_layout:
        report["layout_runs"] = floor.runs_by_layout[layout]
    statistics, per_step = floor.statistics, floor.per_step_s.get(layout, {})
    report["window"] = "run"
    read = _floor_window(window_steps, sorted(floor.online))
    if read is not None:
        # A statistic no window reached keeps the whole run's reading (the higher rules).
        statistics = _higher(floor.statistics, floor.online[read])
        per_step = _higher(per_step, floor.online_per_step_s.get(layout, {}).get(read, {}))
        report["window"] = f"online ({read} steps)"
        if read != window_steps:
            report["window"] += (f" for a {window_steps}-step window"
                                 + (": none that short was measured" if read > window_steps
                                    else ""))
    if step_s is not None and step_s > 0 and per_step:
        # Jitter in seconds per step, over this run's own steps (a share of shorter steps).
        report["step_s"] = round(float(step_s), 6)
        timed = {k: v / step_s for k, v in per_step.items() if k in per_step_statistics()}
        # the statistics the run's own step time holds higher than the shares do
        report["per_step"] = sorted(k for k, v in timed.items() if v > statistics.get(k, 0))
        statistics = _higher(statistics, timed)
    raised = report["raised"]
    # A statistic this detector version does not floor (a newer file's, or a typo): kept
    # out, and said, so a misspelt threshold is not silently left unraised.
    relaxed = relaxed_thresholds()
    report["ignored"] = sorted(k for k in statistics if k not in relaxed)
    for name, value in statistics.items():
        if name not in relaxed:
            continue
        configured = getattr(config, name)
        if value * (1 + ABOVE) > configured:
            raised[name] = {"configured": configured, "floor": value,
                            "used": value * (1 + ABOVE)}
    return replace(config, **{k: v["used"] for k, v in raised.items()}), report


def _higher(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Per statistic, the higher of two floors (a statistic in one only: its value)."""
    return {k: max(a.get(k, v), b.get(k, v)) for k, v in {**a, **b}.items()}


def _floor_window(window_steps: int | None, measured: list[int]) -> int | None:
    """The measured window length whose online floor holds a `window_steps` diagnosis.

    Noise grows as a window shortens, so a window is held to the floor of the longest
    measured window no longer than itself (its own when measured; a floor read over
    shorter windows is the higher one). A window shorter than any measured gets the
    shortest measured floor, the nearest there is (the report says so); None offline."""
    if window_steps is None or not measured:
        return None
    shorter = [w for w in measured if w <= window_steps]
    return max(shorter) if shorter else min(measured)


@dataclass
class CleanReading:
    """What one clean run reads for the noise floor."""

    layout: str
    """`dp<D>-pp<P>`."""
    statistics: dict[str, float | None] = field(default_factory=dict)
    """Threshold field -> its statistic's highest value with the threshold taken away."""
    job_slowdown: float | None = None
    """The run's what-if S."""
    discrepancy: float | None = None
    """Simulation discrepancy, actual / simulated - 1."""
    online: dict[int, dict[str, float | None]] = field(default_factory=dict)
    """Window length -> the same statistics, highest over every online window of the run."""
    per_step_s: dict[str, float | None] = field(default_factory=dict)
    """`PER_STEP` statistics, highest in seconds per step (the value times the mean step
    time of the run it was read on)."""
    online_per_step_s: dict[int, dict[str, float | None]] = field(default_factory=dict)
    """Window length -> the same, highest over every online window of the run."""


Diagnosed = list[tuple[list[Finding], float]]
"""What the rules found on each run they were run on (the whole run, or each online
window), with that run's mean step time in seconds."""


def clean_reading(run: Run, evidence, config: WhatIfDetectorConfig,
                  diagnose: Callable[[WhatIfDetectorConfig], Diagnosed],
                  windows: Callable[[WhatIfDetectorConfig, int], Diagnosed] | None = None
                  ) -> CleanReading:
    """One clean run's reading: per threshold field, its statistic's highest value with
    that threshold taken away (`diagnose(cfg)` runs the detector's rules on the whole run
    under a config; `windows(cfg, w)` runs them on every online window of w steps), in
    seconds per step too for `PER_STEP` statistics, and the run's S and simulation
    discrepancy (its whatif.json)."""
    def read(found: Callable[[WhatIfDetectorConfig], Diagnosed]
             ) -> tuple[dict[str, float | None], dict[str, float | None]]:
        shares, per_step = {}, {}
        for name, relaxed in relaxed_thresholds().items():
            got = [(reading(f, name), step_s) for f, step_s in
                   found(replace(config, **{name: relaxed.off}))]
            got = [(v, step_s) for v, step_s in got if v is not None]
            shares[name] = max((v for v, _ in got), default=None)
            if name in per_step_statistics():
                per_step[name] = max((v * step_s for v, step_s in got), default=None)
        return shares, per_step

    stats, per_step = read(diagnose)
    online = {w: read(lambda cfg, w=w: windows(cfg, w)) for w in WINDOW_STEPS} \
        if windows is not None else {}
    discrepancy = None
    folder = RunFolder(path=Path(run.path))
    if folder.has_whatif:
        d = folder.whatif.get("simulation_discrepancy")
        discrepancy = float(d) - 1.0 if isinstance(d, (int, float)) else None
    return CleanReading(layout=f"dp{run.meta.dp_size}-pp{run.meta.pp_size}",
                        statistics=stats, job_slowdown=float(evidence.view.slowdown),
                        discrepancy=discrepancy, per_step_s=per_step,
                        online={w: r[0] for w, r in online.items()},
                        online_per_step_s={w: r[1] for w, r in online.items()})


def _highest(readings: list[dict[str, float | None]]) -> dict[str, float]:
    """Per threshold field, the highest reading over the runs (fields never read: absent)."""
    out = {}
    for name in relaxed_thresholds():
        vals = [v for r in readings if (v := r.get(name)) is not None]
        if vals:
            out[name] = max(vals)
    return out


def _per_layout(runs: list[CleanReading], lengths: set[int]) -> dict:
    """FamilyFloor's per-layout seconds per step: the highest per layout over its runs. A
    layout with a run read before per-step readings gets none (not a partial max)."""
    per_step, online = {}, {}
    for layout in sorted({r.layout for r in runs}):
        mine = [r for r in runs if r.layout == layout]
        if all(r.per_step_s for r in mine):
            per_step[layout] = _highest([r.per_step_s for r in mine])
        by_window = {w: _highest([r.online_per_step_s[w] for r in mine]) for w in sorted(lengths)
                     if all(r.online_per_step_s.get(w) for r in mine)}
        if by_window:
            online[layout] = by_window
    return {"per_step_s": per_step, "online_per_step_s": online}


def measure_floor(readings: dict) -> NoiseFloor:
    """The noise floor of clean runs: readings is {LayoutFamily: [CleanReading, ...]}."""
    families = {}
    for family, runs in readings.items():
        # a window length every run was read over (an older reading has none)
        lengths = set.intersection(*(set(r.online) for r in runs)) if runs else set()
        families[family] = FamilyFloor(
            n_runs=len(runs), layouts=tuple(sorted({r.layout for r in runs})),
            runs_by_layout=dict(sorted(Counter(r.layout for r in runs).items())),
            statistics=_highest([r.statistics for r in runs]),
            online={w: _highest([r.online[w] for r in runs]) for w in sorted(lengths)},
            **_per_layout(runs, lengths),
            job_slowdown=Spread.of([r.job_slowdown for r in runs]),
            discrepancy=Spread.of([r.discrepancy for r in runs]))
    return NoiseFloor(families=families)
