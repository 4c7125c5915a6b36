"""`transforms.stages.moments`: exact totals of per-row float64 sums, so the statistics are the
same bits for any cut of the rows and any merge order, and rounded once to float32."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import numpy as np

from transforms.stages.moments import (
    FIXED_POINT_BITS,
    Moments,
    _nearest_float32,
    add_features,
    features_from_json,
    features_to_json,
    row_sums,
)


def _rows(seed: int, n: int = 50) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-30, 30, (n, 8))  # far apart binary exponents
    return (rng.standard_normal((n, 8)) * scale).astype(np.float32)


def test_totals_are_the_exact_sums_of_each_rows_float64_sums():
    rows = _rows(0)
    m = Moments.of_rows(rows)
    x64 = rows.astype(np.float64)
    want = sum(Fraction(float(s)) for s in x64.sum(axis=1))
    want_sq = sum(Fraction(float(s)) for s in (x64 * x64).sum(axis=1))
    assert Fraction(m.total, 1 << FIXED_POINT_BITS) == want
    assert Fraction(m.total_sq, 1 << FIXED_POINT_BITS) == want_sq
    assert m.count == rows.size and m.nonfinite == 0


def test_any_cut_and_any_merge_order_give_the_same_bits():
    rows = _rows(1, 200)
    whole = Moments.of_rows(rows)
    rng = random.Random(0)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, 200), 7))
        pieces = [Moments.of_rows(p) for p in np.split(rows, cuts)]
        rng.shuffle(pieces)
        total = Moments()
        for piece in pieces:
            total = total + piece
        assert total == whole
        assert total.mean_var() == whole.mean_var()


def test_mean_and_var_are_rounded_once_to_the_nearest_float32():
    rows = np.array([[1.0, 2.0, 4.0]], np.float32)
    mean, var = Moments.of_rows(rows).mean_var()
    assert mean == np.float32(7 / 3) and mean.dtype == np.float32
    assert var == _nearest_float32(Fraction(14, 9))
    # halfway between two float32 neighbours: ties to even
    one = np.float32(1.0)
    half_ulp = (Fraction(float(np.nextafter(one, np.float32(2)))) - 1) / 2
    assert _nearest_float32(1 + half_ulp) == one
    assert _nearest_float32(1 + half_ulp + Fraction(1, 1 << 80)) == np.nextafter(one, np.float32(2))


def test_constant_rows_give_variance_zero_no_rows_zeros_nonfinite_nan():
    assert Moments.of_rows(np.full((5, 7), 0.1, np.float32)).mean_var() == (np.float32(0.1), 0.0)
    assert Moments().mean_var() == (0.0, 0.0)
    assert Moments.of_rows(np.zeros((0, 3), np.float32)) == Moments()
    bad = np.ones((3, 2), np.float32)
    bad[1, 0] = np.inf
    m = Moments.of_rows(bad)
    assert m.nonfinite == 1 and m.count == 6
    assert all(np.isnan(v) for v in m.mean_var())


def test_json_round_trip_keeps_every_bit():
    moments = {"b": Moments.of_rows(_rows(2)), "a": Moments.of_rows(_rows(3))}
    text = json.dumps(features_to_json(moments))
    assert features_from_json(json.loads(text)) == moments
    assert list(json.loads(text)) == ["a", "b"]
    both = add_features(moments, {"a": Moments.of_rows(_rows(4))})
    assert both["a"] == moments["a"] + Moments.of_rows(_rows(4)) and both["b"] == moments["b"]


def test_a_rows_sums_do_not_depend_on_the_rows_around_it():
    """The read stage takes row sums of packs, chunks and batches cut anywhere: a row's two sums
    are the same alone, inside any block of `row_sums`' buffer and at any offset."""
    rows = _rows(5, 300).reshape(100, 24)  # 24 values a row: many rows per buffer block
    sums, sums_sq = row_sums(rows)
    for i in (0, 1, 57, 99):
        alone = row_sums(rows[i : i + 1])
        assert (alone[0][0], alone[1][0]) == (sums[i], sums_sq[i])
    shifted = row_sums(rows[3:])
    assert np.array_equal(shifted[0], sums[3:]) and np.array_equal(shifted[1], sums_sq[3:])
