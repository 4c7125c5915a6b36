"""Normalisation statistics that do not depend on how the rows were cut or merged.

tensorflow-transform's ``scale_to_z_score`` sums each analysis batch in float32 and merges the
per-batch sums in the order the runner's tasks and bundles produce them, so the mean and
variance's last bit followed the runner (in_memory against multi_processing) and the batches'
cut points (which tied ``--resume`` to handing TFT every reused row in its original batches).

Here a feature's statistics are built from `Moments`: for a set of rows, the number of values
and the sums of the values and of their squares, held as exact integers. Per row, the values'
sum and sum of squares are taken in float64 (``row.astype(float64).sum()`` and the same of the
squares: a float32 value's square is exact in float64; the sum is numpy's pairwise summation over
the row alone, so a fixed function of the row's values wherever the row sits). Those two float64
numbers are added *exactly* into the totals: every float64 is an integer multiple of 2^-1074,
so the totals are Python integers in units of 2^-`FIXED_POINT_BITS`. Adding, merging and
subtracting them is exact, hence associative and commutative: any partition of the rows (tasks,
bundles, batches, resumed pieces) and any merge order give the same totals. The mean and the
(biased, as TFT's) variance are computed once from the totals as exact fractions and rounded
once, to the nearest float32 (ties to even).

Why per-row float64 and not every value exact: integer bins per binary exponent for every value
(``np.frexp`` + weighted ``np.bincount``, split so each float64 bin sum stays exact) cost over
ten times the per-row float64 sums (`row_sums`), which cost about what TensorFlow's float32 sums
of x and x^2 cost (docs/performance.md).
A row is never split across batches, tasks or pieces, so rounding inside a row cannot depend
on them; its effect on the result (a relative 1e-16 per row) is far below float32's 6e-8.

A row holding an infinity or NaN makes the statistics NaN (counted in ``nonfinite``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

# Every finite float64 is an integer multiple of 2**-1074; np.frexp gives it as m * 2**e with
# m in [0.5, 1) (53 significant bits) and e >= -1073, so int(m * 2**53) << (e - 53 + 1126) is
# the value in units of 2**-1126.
FIXED_POINT_BITS = 1126
_SIGNIFICAND_BITS = 53
ROW_BLOCK_BYTES = 256 << 10  # 256 KiB: the float64 buffer `row_sums` casts rows into


def _exact_total(values: np.ndarray) -> int:
    """The exact sum of finite float64 `values`, in units of 2**-FIXED_POINT_BITS."""
    mantissas, exponents = np.frexp(values)
    ints = (mantissas * float(1 << _SIGNIFICAND_BITS)).astype(np.int64)  # exact: 53 bits
    shifts = exponents.astype(np.int64) + (FIXED_POINT_BITS - _SIGNIFICAND_BITS)
    return sum(int(i) << int(s) for i, s in zip(ints.tolist(), shifts.tolist(), strict=True))


def _nearest_float32(value: Fraction) -> np.float32:
    """`value` rounded once to the nearest float32 (ties to even)."""
    with np.errstate(over="ignore"):  # beyond float32: inf, as a float32 sum would be
        guess = np.float32(float(value))  # float() rounds to float64 first: see the neighbours
    if not np.isfinite(guess):
        return guess
    best = guess
    below = np.nextafter(guess, np.float32(-np.inf))
    above = np.nextafter(guess, np.float32(np.inf))
    for candidate in (below, above):
        if not np.isfinite(candidate):
            continue
        error = abs(Fraction(float(candidate)) - value)
        best_error = abs(Fraction(float(best)) - value)
        even = int(candidate.view(np.uint32)) % 2 == 0
        if error < best_error or (error == best_error and even):
            best = candidate
    return np.float32(best)


@dataclasses.dataclass(frozen=True)
class Moments:
    """Exact count, sum and sum of squares of a set of float32 values (one feature's rows).

    Attributes:
      count: how many values.
      total: their sum (each row's float64 sum), in units of 2**-`FIXED_POINT_BITS`.
      total_sq: the same of their squares.
      nonfinite: rows whose sums were not finite (not in `total` / `total_sq`).
    """

    count: int = 0
    total: int = 0
    total_sq: int = 0
    nonfinite: int = 0

    @classmethod
    def of_rows(cls, rows: np.ndarray) -> Moments:
        """The moments of `rows` (float32 [rows, ...]: one row per window)."""
        rows = np.asarray(rows, dtype=np.float32)
        return cls.of_row_sums(*row_sums(rows), values_per_row=int(np.prod(rows.shape[1:])))

    @classmethod
    def of_row_sums(cls, sums: np.ndarray, sums_sq: np.ndarray, *, values_per_row: int) -> Moments:
        """The moments of rows of `values_per_row` values whose `row_sums` are given."""
        finite = np.isfinite(sums) & np.isfinite(sums_sq)
        bad = int(finite.size - np.count_nonzero(finite))
        if bad:
            sums, sums_sq = sums[finite], sums_sq[finite]
        count = int(finite.size) * values_per_row
        return cls(count, _exact_total(sums), _exact_total(sums_sq), bad)

    def __add__(self, other: Moments) -> Moments:
        return Moments(
            self.count + other.count,
            self.total + other.total,
            self.total_sq + other.total_sq,
            self.nonfinite + other.nonfinite,
        )

    def mean_var(self) -> tuple[np.float32, np.float32]:
        """(mean, biased variance) as float32, each the exact value rounded once; (0, 0) for no
        values, (NaN, NaN) when a row was not finite."""
        if self.nonfinite:
            return np.float32(np.nan), np.float32(np.nan)
        if self.count == 0:
            return np.float32(0.0), np.float32(0.0)
        scale = 1 << FIXED_POINT_BITS
        mean = Fraction(self.total, self.count * scale)
        var = Fraction(self.total_sq, self.count * scale) - mean * mean
        # each row's sums are rounded apart: all-equal values can leave a tiny negative
        return _nearest_float32(mean), _nearest_float32(max(var, Fraction(0)))

    def to_json(self) -> dict[str, int]:
        """As a commit record stores it (JSON integers of any size)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Moments:
        """The inverse of `to_json`."""
        return cls(**{f.name: int(obj[f.name]) for f in dataclasses.fields(cls)})


FeatureMoments = dict[str, Moments]  # feature key -> its moments


def row_sums(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's float64 sum of its values and of their squares (`rows`: float32 [rows, ...]).

    The numpy part of `Moments` (it releases the GIL: the read stage runs it in its compute
    pool); a row's two sums depend on its values only: each is numpy's pairwise sum over that
    row alone, of its values cast to float64 (a float32's square is exact there). Rows go
    through a float64 buffer of `ROW_BLOCK_BYTES`, a few rows at a time (cache-sized: faster
    than casting a whole batch, docs/performance.md).
    """
    n = rows.shape[0]
    sums, sums_sq = np.zeros(n), np.zeros(n)
    if rows.size == 0:
        return sums, sums_sq
    flat = rows.reshape(n, -1)
    block = max(1, ROW_BLOCK_BYTES // (8 * flat.shape[1]))
    buffer = np.empty((block, flat.shape[1]), np.float64)
    for start in range(0, n, block):
        stop = min(start + block, n)
        b = buffer[: stop - start]
        b[...] = flat[start:stop]
        b.sum(axis=1, out=sums[start:stop])
        np.multiply(b, b, out=b)
        b.sum(axis=1, out=sums_sq[start:stop])
    return sums, sums_sq


def add_features(a: Mapping[str, Moments], b: Mapping[str, Moments]) -> FeatureMoments:
    """Feature-wise sum of two {feature: Moments} (a feature missing from one counts as none)."""
    return {k: a.get(k, Moments()) + b.get(k, Moments()) for k in sorted({*a, *b})}


def features_to_json(moments: Mapping[str, Moments]) -> dict[str, dict[str, int]]:
    """{feature: Moments} -> JSON values, feature keys sorted."""
    return {k: moments[k].to_json() for k in sorted(moments)}


def features_from_json(obj: Mapping[str, Any]) -> FeatureMoments:
    """The inverse of `features_to_json`."""
    return {k: Moments.from_json(v) for k, v in obj.items()}


def total(pieces: Iterable[Mapping[str, Moments]]) -> FeatureMoments:
    """The exact sum, feature by feature, of `pieces` ({feature: Moments} each); {} for none.
    Exact, so any grouping and order give the same (a Beam combine function as it is)."""
    summed: FeatureMoments = {}
    for piece in pieces:
        for feature, moments in piece.items():
            summed[feature] = summed.get(feature, Moments()) + moments
    return dict(sorted(summed.items()))


def to_json(moments: Mapping[str, Moments]) -> dict[str, dict[str, int]]:
    """{feature: Moments} as a manifest stores them."""
    return {feature: m.to_json() for feature, m in sorted(moments.items())}


def from_json(obj: Mapping[str, Any]) -> FeatureMoments:
    """The inverse of `to_json`."""
    return {feature: Moments.from_json(m) for feature, m in obj.items()}
