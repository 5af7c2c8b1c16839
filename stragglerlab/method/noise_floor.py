"""The noise floor: what clean runs of each layout family look like to the analysis.

A detector threshold set on fault cases says nothing of how often clean noise
crosses it. The noise floor is measured instead: over clean runs of a layout
family (pure DP, pure PP, DP x PP), the highest value each detector statistic
reached when its own threshold was taken away (`whatif_noise.py` says how), and
the spread of the run-level numbers (job S, simulation discrepancy). A
finding must stand above its family's floor to be counted.

The file (`config/noise-floor.yaml` ships the testbed's; `stragglerlab
noise-floor` writes one from your clean runs):

    schema: stragglerlab.noise-floor/1
    families:
      dp+pp:
        n_runs: 9
        layouts: [dp2-pp2, dp2-pp4, dp4-pp4]
        statistics: {link_step_share: 0.041, ...}    # threshold field -> clean maximum
        job_slowdown: {min: 1.02, median: 1.04, max: 1.06, n: 9}
        ...

    floor = read_noise_floor(DEFAULT_NOISE_FLOOR)
    floor.family(LayoutFamily.DP_PP).statistics["link_step_share"]
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from stragglerlab.trace.meta import LayoutFamily
from stragglerlab.util.atomic import atomic_write_text
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import Checker, echo, load_yaml

NOISE_FLOOR_SCHEMA = "stragglerlab.noise-floor/1"
"""Schema tag of a noise-floor file."""
NOISE_FLOOR_FIX = ("rewrite it with `stragglerlab noise-floor --runs CLEAN_RUN... --out DIR`, "
                   "or pass --noise-floor none")
"""The fix a bad noise-floor file message suggests."""
NOISE_FLOOR_YAML = "noise-floor.yaml"
"""Fixed file name inside a --out folder."""
DEFAULT_NOISE_FLOOR = Path(str(importlib.resources.files("stragglerlab") / "config"
                               / NOISE_FLOOR_YAML))
"""The testbed's measured floor, shipped as package data."""


def _given(raw: dict, key: str, empty: dict | list) -> object:
    """raw[key], or `empty` when the key is left out or null (a wrong type stays wrong)."""
    value = raw.get(key)
    return empty if value is None else value


@dataclass(frozen=True, kw_only=True)
class Spread:
    """How one run-level number spread over clean runs."""

    min: float
    """Lowest value."""
    median: float
    """Median."""
    max: float
    """Highest value."""
    n: int
    """Runs it was read on."""

    @classmethod
    def of(cls, values: list[float]) -> Spread | None:
        """The spread of finite values; None without any."""
        v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
        if not len(v):
            return None
        return cls(min=round(float(v.min()), 6), median=round(float(np.median(v)), 6),
                   max=round(float(v.max()), 6), n=int(len(v)))

    def to_json(self) -> dict:
        """YAML/JSON form."""
        return {"min": self.min, "median": self.median, "max": self.max, "n": self.n}

    @classmethod
    def from_json(cls, raw: object, chk: Checker, where: str) -> Spread:
        """Validated."""
        raw = chk.mapping(raw, where)
        out = cls(min=chk.number(raw.get("min"), f"{where}.min"),
                  median=chk.number(raw.get("median"), f"{where}.median"),
                  max=chk.number(raw.get("max"), f"{where}.max"),
                  n=chk.integer(raw.get("n"), f"{where}.n", minimum=1))
        if not out.min <= out.median <= out.max:
            chk.fail(where, "needs min <= median <= max")
        return out


@dataclass(frozen=True, kw_only=True)
class FamilyFloor:
    """The floor of one layout family."""

    n_runs: int
    """Clean runs it was measured on."""
    layouts: tuple[str, ...] = ()
    """Their layouts, `dp<D>-pp<P>`."""
    runs_by_layout: dict[str, int] = field(default_factory=dict)
    """Layout -> how many of the runs are of it (what each `per_step_s` maximum is over:
    a maximum of n runs is exceeded by about 1 in n + 1 new clean runs). Empty in files
    written before it was kept."""
    statistics: dict[str, float] = field(default_factory=dict)
    """Detector threshold field -> the highest value its statistic reached on these clean
    runs with that threshold taken away. A field absent never reached the rule's other
    tests on a clean run: its configured threshold stands."""
    job_slowdown: Spread | None = None
    """The runs' what-if S."""
    discrepancy: Spread | None = None
    """Their simulation discrepancy, actual / simulated step time - 1."""
    online: dict[int, dict[str, float]] = field(default_factory=dict)
    """Window length in steps -> the same statistics, read over every sliding window of
    that many steps that the online mode (or the live monitor) diagnoses: a short window
    is noisier than a whole run, so its floor is its own."""
    per_step_s: dict[str, dict[str, float]] = field(default_factory=dict)
    """Layout `dp<D>-pp<P>` -> a share-of-the-step statistic (`whatif_noise.PER_STEP`) ->
    its highest reading on that layout's clean runs in seconds per step (the share times
    the mean step time it was read over). At one layout, host jitter adds about the same
    time to a step however long the step (fewer tokens, a smaller model), so a job of
    shorter steps reads it as a larger share; a run of a measured layout is held to this
    over its own mean step time where that is the higher. Across layouts it is not one
    time (16 ranks on 2 cores jitter more than 4), hence per layout."""
    online_per_step_s: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    """Layout -> window length -> the same, read over every online window of that length."""

    def to_json(self) -> dict:
        """YAML/JSON form."""
        out: dict = {"n_runs": self.n_runs, "layouts": list(self.layouts),
                     **({"runs_by_layout": dict(sorted(self.runs_by_layout.items()))}
                        if self.runs_by_layout else {}),
                     "statistics": {k: round(float(v), 6)
                                    for k, v in sorted(self.statistics.items())}}
        if self.online:
            out["online"] = _windows_json(self.online)
        if self.per_step_s:
            out["per_step_s"] = {lay: _numbers_json(st) for lay, st in sorted(
                self.per_step_s.items())}
        if self.online_per_step_s:
            out["online_per_step_s"] = {lay: _windows_json(by) for lay, by in sorted(
                self.online_per_step_s.items())}
        for name in ("job_slowdown", "discrepancy"):
            spread = getattr(self, name)
            if spread is not None:
                out[name] = spread.to_json()
        return out

    @classmethod
    def from_json(cls, raw: object, chk: Checker, where: str) -> FamilyFloor:
        """Validated."""
        raw = chk.mapping(raw, where)
        # Left out (or null): none. `x or {}` would take [] or "" for an empty mapping too.
        stats = _numbers(raw, "statistics", chk, where)
        per_step = chk.mapping(_given(raw, "per_step_s", {}), f"{where}.per_step_s")
        online_per_step = chk.mapping(_given(raw, "online_per_step_s", {}),
                                      f"{where}.online_per_step_s")
        spreads = {name: Spread.from_json(raw[name], chk, f"{where}.{name}")
                   for name in ("job_slowdown", "discrepancy")
                   if raw.get(name) is not None}
        return cls(n_runs=chk.integer(raw.get("n_runs"), f"{where}.n_runs", minimum=1),
                   layouts=tuple(chk.string(x, f"{where}.layouts[{i}]") for i, x in
                                 enumerate(chk.listing(_given(raw, "layouts", []),
                                                       f"{where}.layouts"))),
                   runs_by_layout=_counts(raw, chk, where),
                   statistics=stats, online=_by_window(raw, "online", chk, where),
                   per_step_s={chk.string(lay, f"{where}.per_step_s key (a layout)"):
                               _numbers(per_step, lay, chk, f"{where}.per_step_s")
                               for lay in per_step},
                   online_per_step_s={
                       chk.string(lay, f"{where}.online_per_step_s key (a layout)"):
                       _by_window(online_per_step, lay, chk, f"{where}.online_per_step_s")
                       for lay in online_per_step},
                   **spreads)


def _counts(raw: dict, chk: Checker, where: str) -> dict[str, int]:
    got = chk.mapping(_given(raw, "runs_by_layout", {}), f"{where}.runs_by_layout")
    return {chk.string(lay, f"{where}.runs_by_layout key (a layout)"):
            chk.integer(n, f"{where}.runs_by_layout.{lay}", minimum=1) for lay, n in got.items()}


def _numbers_json(stats: dict[str, float]) -> dict[str, float]:
    return {k: round(float(v), 6) for k, v in sorted(stats.items())}


def _windows_json(by_window: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    return {int(w): _numbers_json(st) for w, st in sorted(by_window.items())}


def _numbers(raw: dict, key: str, chk: Checker, where: str) -> dict[str, float]:
    """raw[key] as {statistic: non-negative number}, validated ({} when left out)."""
    got = chk.mapping(_given(raw, key, {}), f"{where}.{key}")
    return {chk.string(k, f"{where}.{key} key"): chk.number(v, f"{where}.{key}.{k}", minimum=0.0)
            for k, v in got.items()}


def _by_window(raw: dict, key: str, chk: Checker, where: str) -> dict[int, dict[str, float]]:
    """raw[key] as {window length: {statistic: number}}, validated ({} when left out)."""
    got = chk.mapping(_given(raw, key, {}), f"{where}.{key}")
    return {chk.integer(w, f"{where}.{key} key (a window length)", minimum=1):
            _numbers(got, w, chk, f"{where}.{key}") for w in got}


@dataclass(frozen=True, kw_only=True)
class NoiseFloor:
    """Every measured family's floor."""

    families: dict[LayoutFamily, FamilyFloor] = field(default_factory=dict)
    """Layout family -> its floor (a family not measured has none)."""
    source: str = ""
    """Where it was read from (for messages and reports)."""

    def family(self, family: LayoutFamily) -> FamilyFloor | None:
        """The family's floor, None when it was not measured."""
        return self.families.get(family)

    def to_json(self) -> dict:
        """YAML/JSON form."""
        return {"schema": NOISE_FLOOR_SCHEMA,
                "families": {f.value: ff.to_json() for f, ff in sorted(
                    self.families.items(), key=lambda kv: kv[0].value)}}

    @classmethod
    def from_json(cls, raw: object, chk: Checker, source: str = "") -> NoiseFloor:
        """Validated."""
        raw = chk.mapping(raw, "noise-floor file")
        schema = chk.string(raw.get("schema"), "schema")
        if schema != NOISE_FLOOR_SCHEMA:
            chk.fail("schema", f"{echo(schema)} is not {NOISE_FLOOR_SCHEMA}")
        known = ", ".join(f.value for f in LayoutFamily)
        if raw.get("families") is None:
            chk.fail("families", f"missing: a floor names at least one layout family ({known})")
        fams = chk.mapping(raw["families"], "families")
        if not fams:  # a floor of no family would silently raise no threshold
            chk.fail("families", f"names no layout family: a floor measures at least one "
                     f"({known})")
        out = {}
        for name, value in fams.items():
            try:
                fam = LayoutFamily(name)
            except ValueError:
                chk.fail(f"families.{echo(name)}", "not a layout family (one of "
                         f"{', '.join(f.value for f in LayoutFamily)})")
            out[fam] = FamilyFloor.from_json(value, chk, f"families.{name}")
        return cls(families=out, source=source)


def read_noise_floor(path: str | Path) -> NoiseFloor:
    """Read and validate a noise-floor file."""
    chk = Checker(path, NOISE_FLOOR_FIX)
    return NoiseFloor.from_json(load_yaml(path, "noise-floor file", NOISE_FLOOR_FIX), chk,
                                str(path))


def write_noise_floor(path: str | Path, floor: NoiseFloor, header: str = "") -> None:
    """Write a noise-floor file atomically (`header`: comment lines put on top)."""
    text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    atomic_write_text(path, text + yaml.safe_dump(floor.to_json(), sort_keys=False))


def noise_floor_option(value: str | None) -> NoiseFloor | None:
    """A verb's --noise-floor: None or `default` -> the shipped floor (none when it is not
    installed), `none` -> no floor, else a file."""
    if value is not None and not value.strip():
        raise InputError("--noise-floor is empty: pass a noise-floor.yaml (`stragglerlab "
                         "noise-floor` writes one), `default` or `none`")
    if value == "none":
        return None
    path = DEFAULT_NOISE_FLOOR if value in (None, "default") else Path(value)
    if value in (None, "default") and not path.is_file():
        return None
    if not path.is_file():
        raise InputError(f"no noise-floor file {value}: {NOISE_FLOOR_FIX}")
    return read_noise_floor(path)
