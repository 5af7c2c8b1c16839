"""stragglerlab.method.grouped: the array group-bys give pandas' numbers bit for bit (issue 32)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglerlab.method.grouped import (
    group_median,
    group_quantiles,
    group_sum,
    group_value_order,
    inner_join,
    optype_mask,
    optype_masks,
    row_codes,
)

# Keys in row order: pandas sums rows already grouped (sorted keys) by another algorithm
# than the rest, and the last bits differ; both must be matched.
KEY_ORDERS = {
    "random": lambda rng, n, g: rng.integers(0, g, n),
    "sorted": lambda rng, n, g: np.sort(rng.integers(0, g, n)),
    "one group": lambda rng, n, g: np.zeros(n, dtype=np.int64),
}


def _values(rng: np.random.Generator, n: int, nan: bool) -> np.ndarray:
    """Latency-like values with ties (rounded), over several magnitudes."""
    v = np.round(rng.exponential(1.0, n) * 10 ** rng.uniform(-6, 3), int(rng.integers(2, 9)))
    if nan:
        v[rng.random(n) < 0.15] = np.nan
    return v


@pytest.mark.parametrize("order", sorted(KEY_ORDERS))
def test_sum_median_quantiles_match_pandas(order):
    rng = np.random.default_rng(7)
    qs = (0.25, 0.5, 0.75, 0.1)
    for trial in range(120):
        n, g = int(rng.integers(1, 60)), int(rng.integers(1, 6))
        key = KEY_ORDERS[order](rng, n, g)
        values = _values(rng, n, nan=trial % 3 == 0)
        groups = int(key.max()) + 1
        by = pd.Series(values).groupby(key)
        expect_sum = by.sum().reindex(range(groups), fill_value=0.0).to_numpy()
        assert np.array_equal(group_sum(key, values, groups), expect_sum, equal_nan=True)
        expect_median = by.median().reindex(range(groups)).to_numpy()
        assert np.array_equal(group_median(key, values, groups), expect_median,
                              equal_nan=True)
        table = by.quantile(list(qs)).unstack().reindex(index=range(groups), columns=list(qs))
        for q, got in zip(qs, group_quantiles(key, values, groups, qs)):
            assert np.array_equal(got, table[q].to_numpy(), equal_nan=True)


@pytest.mark.parametrize("order", sorted(KEY_ORDERS))
def test_group_value_order_is_the_lexsort(order):
    """Rows by key then value, ties (equal values, -0.0 and 0.0, every NaN) in row order:
    the same permutation as np.lexsort, so a value picked by position keeps its sign bit."""
    rng = np.random.default_rng(11)
    for trial in range(200):
        n, g = int(rng.integers(1, 300)), int(rng.integers(1, 40))
        key = KEY_ORDERS[order](rng, n, g)
        values = _values(rng, n, nan=trial % 2 == 0)
        if trial % 3 == 0:  # signed zeros and NaN of either sign among the ties
            values[rng.random(n) < 0.2] = -0.0
            values[rng.random(n) < 0.2] = 0.0
            values[rng.random(n) < 0.1] = -np.nan
        assert np.array_equal(group_value_order(key, values), np.lexsort((values, key)))
    big = np.array([2**40, 0, 2**40, 5])  # a key too large to fold: the lexsort itself
    assert np.array_equal(group_value_order(big, np.array([1.0, 2.0, 0.5, np.nan])),
                          np.lexsort((np.array([1.0, 2.0, 0.5, np.nan]), big)))
    assert len(group_value_order(np.zeros(0, dtype=np.int64), np.zeros(0))) == 0


def test_row_codes_number_groups_as_a_sorted_groupby():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 4, 200), rng.integers(-2, 3, 200)
    codes, n = row_codes([a, b])
    expect = pd.DataFrame({"a": a, "b": b}).groupby(["a", "b"]).ngroup().to_numpy()
    assert np.array_equal(codes, expect) and n == expect.max() + 1
    assert row_codes([np.zeros(0, dtype=np.int64)])[1] == 0


def test_row_codes_fold_integer_keys_as_the_lexsort_numbers_them():
    """Integer keys folded into one integer per row give the codes of the lexsort's groups
    (negative keys, bools, a key too wide to fold, a float key)."""

    def by_lexsort(keys):
        order = np.lexsort(tuple(reversed(keys)))
        new = np.zeros(len(order), dtype=bool)
        new[0] = True
        for k in keys:
            new[1:] |= k[order][1:] != k[order][:-1]
        codes = np.empty(len(order), dtype=np.int64)
        codes[order] = np.cumsum(new) - 1
        return codes, int(new.sum())

    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(1, 400))
        keys = [rng.integers(-5, 9, n), rng.integers(0, 3, n) == 1, rng.integers(0, 50, n)]
        if trial % 4 == 1:
            keys.append(rng.integers(-2**61, 2**61, n))  # too wide to fold with the rest
        if trial % 4 == 2:
            keys.append(np.round(rng.normal(size=n), 1))  # a float key
        got, n_codes = row_codes(keys)
        want, n_want = by_lexsort(keys)
        assert n_codes == n_want and np.array_equal(got, want)


def test_inner_join_rows_come_in_merge_order():
    rng = np.random.default_rng(2)
    for _ in range(100):
        nl, nr = rng.integers(0, 30, 2)
        left = pd.DataFrame(rng.integers(0, 3, (nl, 2)), columns=["x", "y"])
        right = pd.DataFrame(rng.integers(0, 3, (nr, 2)), columns=["x", "y"])
        merged = left.assign(li=np.arange(nl)).merge(right.assign(ri=np.arange(nr)),
                                                     on=["x", "y"])
        li, ri = inner_join([left["x"].to_numpy(), left["y"].to_numpy()],
                            [right["x"].to_numpy(), right["y"].to_numpy()])
        assert np.array_equal(li, merged["li"].to_numpy())
        assert np.array_equal(ri, merged["ri"].to_numpy())


def test_optype_masks_read_text_and_categorical_alike():
    text = pd.Series(["forward-send", "gc", "forward-recv", "gc", "optimizer"])
    for column in (text, text.astype("category"),
                   pd.Series(pd.Categorical(text, categories=["optimizer", "gc", "x",
                                                              "forward-send", "forward-recv"]))):
        assert optype_mask(column, ["gc"]).tolist() == [False, True, False, True, False]
        sends, none, both = optype_masks(column, [["forward-send"], ["x"],
                                                  ["forward-send", "forward-recv"]])
        assert sends.tolist() == [True, False, False, False, False]
        assert not none.any() and both.tolist() == [True, False, True, False, False]
