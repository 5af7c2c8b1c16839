"""Per-field ranges of detector configs, checked in each config's __post_init__.

The registry's one rule (`registry._out_of_range`: a float >= 0, a count 1..1e6) holds
for every detector; a field whose math needs more says so here, with the reason. The
ranges follow one principle: a threshold may be so strict that its rule never fires (an
off switch: tests set a share to 1.01), but not past the point where the reference
itself passes (a ratio under 1, a score threshold over 1, a significance level of 1:
every rank named), and no value may break the arithmetic (a divisor of 0, a variance
whose square or reciprocal is not finite, a baseline over no step).

    in_range(self, "noise_sd", SD_MIN, SD_MAX, why="its square and reciprocal stay finite")

A failed check is a SettingRangeError (a ValueError, as for any dataclass built in code);
`registry.configured` turns it into one InputError for `detect --set` and the workflow.
"""

from __future__ import annotations

import dataclasses
import math

SD_MIN, SD_MAX = 1e-9, 1e9
"""Bounds of a spread (relative units) whose square and reciprocal the math takes: both
stay within 1e-18..1e18, finite with room for the terms they scale."""
FRACTION_MIN = 1e-9
"""Least fraction of a step a setting that divides takes: below any clock's resolution,
and the quotient stays finite."""


class SettingRangeError(ValueError):
    """A config field outside the range its math needs; the message names the field, the
    value, the allowed range and the default."""


def _bound(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def in_range(config, field: str, lo: float, hi: float = math.inf, *, lo_open: bool = False,
             hi_open: bool = False, why: str) -> None:
    """SettingRangeError unless lo <= config.field <= hi (strict where `*_open`); NaN fails."""
    value = getattr(config, field)
    above = lo < value if lo_open else lo <= value
    below = value < hi if hi_open else value <= hi
    if above and below:
        return
    if hi == math.inf:
        allowed = f"a number {'>' if lo_open else '>='} {_bound(lo)}"
    else:
        allowed = (f"a number in {'(' if lo_open else '['}{_bound(lo)}, {_bound(hi)}"
                   f"{')' if hi_open else ']'}")
    default = next(f.default for f in dataclasses.fields(config) if f.name == field)
    raise SettingRangeError(f"{field}={value!r}: expected {allowed}, since {why} "
                            f"(default {default!r})")
