"""Group-by over numpy arrays that gives pandas' numbers bit for bit, without its overhead.

The live monitor re-runs the `whatif` detector on a window of a few steps after every
step; there a pandas groupby or merge costs far more in per-call overhead (index
building, dtype checks, copies) than in arithmetic. These helpers do the same
arithmetic on plain arrays, in the order pandas does it, so that every number the
detector derives is the same as with pandas:

    codes = row_codes([step, dp_rank, stage])      # dense group code per row
    li, ri = inner_join(left_keys, right_keys)     # DataFrame.merge(how="inner") rows
    med = group_median(key, values, n_groups)      # groupby(key)[v].median()
    med = sorted_group_median(key, values, n)      # the same, rows already by key, value
    q25, q75 = group_quantiles(key, values, n_groups, (0.25, 0.75))  # .quantile(...)
    sums = group_sum(key, values, n_groups)        # groupby(key)[v].sum()
    mask = optype_mask(trace["optype"], ["forward-send"])  # astype(str).isin(...)
    sends, recvs = optype_masks(trace["optype"], [["forward-send"], ["forward-recv"]])

Sums, medians and quantiles are where float results could drift: pandas sums with
Kahan compensation, or with numpy's reduceat where the rows are already grouped
(`group_sum` takes the same path), takes an even-sized median as the mean of the two
middle values, and interpolates quantiles by its own formula (so do `group_median`
and `group_quantiles`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def row_codes(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    """(code per row, number of codes): rows with equal keys share a code, and codes
    ascend with the keys in lexicographic order (the first key most significant), as
    the group order of a sorted pandas groupby."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    folded = _fold(keys)
    # One integer per row, ascending as the keys, sorts alone (equal integers get one code
    # whatever their order); other keys go through lexsort. `new`: a group starts there.
    sorted_keys = [folded] if folded is not None else [np.asarray(k) for k in keys]
    order = (np.argsort(folded) if folded is not None
             else np.lexsort(tuple(reversed(sorted_keys))))
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for k in sorted_keys:
        srt = k[order]
        new[1:] |= srt[1:] != srt[:-1]
    codes = np.empty(n, dtype=np.int64)
    codes[order] = np.cumsum(new) - 1
    return codes, int(new.sum())


def _fold(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """Integer (or bool) keys as one int64 per row, in the keys' lexicographic order (the
    first most significant); None for other dtypes or when the ranges do not fit 62 bits."""
    arrays = [np.asarray(k) for k in keys]
    if not all(a.dtype.kind in "iub" for a in arrays):
        return None
    out, span = np.zeros(len(arrays[0]), dtype=np.int64), 1
    for a in reversed(arrays):  # the last key least significant
        lo, hi = int(a.min()), int(a.max())
        if span * (hi - lo + 1) >= 2**62 or hi >= 2**63:
            return None
        out += (a.astype(np.int64) - lo) * span
        span *= hi - lo + 1
    return out


def inner_join(left: Sequence[np.ndarray], right: Sequence[np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Row positions (left, right) of an inner join on equal keys, in the order pandas'
    `merge(how="inner")` gives them: left rows in order, each with its matching right
    rows in theirs. Integer keys (no NaN: pandas matches NaN with NaN, this does not)."""
    n_left = len(left[0])
    codes, n_codes = row_codes([np.concatenate([a, b]) for a, b in zip(left, right)])
    lcode, rcode = codes[:n_left], codes[n_left:]
    r_order = np.argsort(rcode, kind="stable")  # right rows by code, in their order
    r_count = np.bincount(rcode, minlength=n_codes)
    r_start = np.cumsum(r_count) - r_count
    per_left = r_count[lcode]
    li = np.repeat(np.arange(n_left), per_left)
    # The j-th match of a left row is the j-th right row of its code.
    j = np.arange(len(li)) - np.repeat(np.cumsum(per_left) - per_left, per_left)
    return li, r_order[r_start[lcode][li] + j]


def group_value_order(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`np.lexsort((values, key))` (rows by integer key >= 0, then value, NaN last, ties
    in row order) from two sorts of plain numbers instead of two stable sorts: the values'
    dense rank (equal values share it, as the lexsort treats them alike) folds into one
    integer per row with the key and the row, and those integers are all distinct."""
    n = len(values)
    key = np.asarray(key, dtype=np.int64)
    if n == 0 or key.min() < 0 or (int(key.max()) + 1) * (n + 1) * n >= 2**62:
        return np.lexsort((values, key))
    by_value = np.argsort(values)  # any order among equal values: the rank is shared
    v = values[by_value]
    nan = np.isnan(v)  # NaN sorts last; all NaN share one rank, as in the lexsort
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = (v[1:] != v[:-1]) & ~(nan[1:] & nan[:-1])
    dense = np.empty(n, dtype=np.int64)
    dense[by_value] = np.cumsum(new) - 1
    return np.sort((key * (n + 1) + dense) * n + np.arange(n)) % n


def sorted_in_groups(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` by group, then by value within a group (NaN last):
    `values[np.lexsort((values, key))]`."""
    return values[group_value_order(key, values)]


def group_median(key: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group 0..n_groups-1, the median of its non-NaN values (NaN where none), as
    pandas' groupby median: an even count takes the mean of the two middle values."""
    order = group_value_order(key, values)  # by group, then value; NaN sorts last in a group
    return sorted_group_median(key[order], values[order], n_groups)


def sorted_group_median(key: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """`group_median` of rows already by group, then value (NaN last in a group): the
    order `group_value_order` gives, or a subset of rows kept in it."""
    size = np.bincount(key, minlength=n_groups)
    valid = np.bincount(key[~np.isnan(values)], minlength=n_groups)
    start = np.cumsum(size) - size
    out = np.full(n_groups, np.nan)
    has = valid > 0
    lo = start[has] + (valid[has] - 1) // 2
    hi = start[has] + valid[has] // 2
    out[has] = np.where(lo == hi, values[lo], (values[lo] + values[hi]) / 2)
    return out


def group_quantiles(key: np.ndarray, values: np.ndarray, n_groups: int,
                    qs: Sequence[float]) -> list[np.ndarray]:
    """Per quantile q, per group 0..n_groups-1: the q-quantile of the group's non-NaN
    values (NaN where none), linear, as pandas' groupby quantile computes it: the value
    at floor(q (n - 1)) plus the fraction of the gap to the next (not numpy's formula)."""
    v = sorted_in_groups(key, values)  # NaN sorts last in a group
    size = np.bincount(key, minlength=n_groups)
    valid = np.bincount(key[~np.isnan(values)], minlength=n_groups)
    start = np.cumsum(size) - size
    has = valid > 0
    out = []
    for q in qs:
        col = np.full(n_groups, np.nan)
        at = q * (valid[has] - 1).astype(np.float64)
        lo = start[has] + at.astype(np.int64)
        frac = at % 1
        val = v[lo]
        nxt = v[np.where(frac == 0.0, lo, lo + 1)]
        col[has] = np.where(frac == 0.0, val, val + (nxt - val) * frac)
        out.append(col)
    return out


def group_sum(key: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group 0..n_groups-1, the sum of its non-NaN values (0 where none), as pandas'
    groupby sum computes it; key: the group of each row, numbered as a sorted groupby
    numbers them (`row_codes`). pandas takes one of two paths, and the last bits differ:
    with the rows already in group order and no NaN, numpy's add.reduceat per group;
    else Kahan-compensated addition in row order. Both are repeated here (the Kahan pass
    vectorized over groups, one pass per row rank in a group)."""
    if len(key) and not np.isnan(values).any() and (np.diff(key) >= 0).all():
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        out = np.zeros(n_groups)
        out[key[starts]] = np.add.reduceat(values, starts)
        return out
    order = np.argsort(key, kind="stable")  # row order kept within a group
    k, v = key[order], values[order]
    size = np.bincount(k, minlength=n_groups)
    start = np.cumsum(size) - size
    rank = np.arange(len(k)) - start[k]
    total = np.zeros(n_groups)
    comp = np.zeros(n_groups)
    for r in range(int(size.max()) if len(k) else 0):
        at = rank == r
        g, x = k[at], v[at]
        ok = ~np.isnan(x)
        g, x = g[ok], x[ok]
        y = x - comp[g]
        t = total[g] + y
        with np.errstate(invalid="ignore"):
            c = (t - total[g]) - y
        comp[g] = np.where(np.isnan(c), 0.0, c)  # +-inf values: pandas resets it too
        total[g] = t
    return total


def optype_mask(optype: pd.Series, names: Sequence[str]) -> np.ndarray:
    """Rows whose op type, as a string, is one of `names` (`optype.astype(str).isin(names)`);
    on a categorical column from its codes, without building a string per row."""
    return optype_masks(optype, [names])[0]


def optype_masks(optype: pd.Series, wanted: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """`optype_mask` for each list of names in `wanted`, reading the column once."""
    if isinstance(optype.dtype, pd.CategoricalDtype):
        cat = optype.array  # the Categorical itself: its codes without a Series around them
        names = [str(c) for c in cat.categories]  # a handful of op types
        codes = cat.codes
        out = []
        for w in wanted:
            hit = [i for i, name in enumerate(names) if name in set(w)]
            out.append(codes == hit[0] if len(hit) == 1 else np.isin(codes, hit))
        return out
    text = optype.astype(str)
    return [text.isin(list(w)).to_numpy() for w in wanted]
