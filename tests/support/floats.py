"""Comparing float features computed on this machine with features stored by another.

Samples are bit-exact everywhere, and float features are bit-for-bit deterministic on one machine,
but not across CPU models: numpy's FFT (pocketfft) and BLAS pick kernels per CPU (AVX2, AVX-512,
FMA or not), so a log-mel computed here can differ from one stored by another machine by a few
float32 ulps (14 measured between two x86-64 hosts). A test that compares with a fixture written
elsewhere compares within `FEATURE_ULPS` ulps of the array's largest magnitude: FFT rounding errors
scale with the transform's norm, not with each output value, so a bound per value would fail on
small values (mfcc coefficients near 0) that are not less accurate in absolute terms.
"""

from __future__ import annotations

import numpy as np

FEATURE_ULPS = 64  # 4x the largest cross-CPU difference measured (14 ulps, log_mel)


def scale_bound(expected: np.ndarray, *, ulps: int = FEATURE_ULPS) -> float:
    """`ulps` float32 ulps at the largest magnitude in `expected` (an absolute tolerance)."""
    peak = np.float32(np.max(np.abs(expected))) if np.size(expected) else np.float32(0)
    return float(ulps * np.spacing(peak))


def assert_close_across_cpus(
    actual: np.ndarray, expected: np.ndarray, *, ulps: int = FEATURE_ULPS, err_msg: str = ""
) -> None:
    """Asserts |actual - expected| <= `ulps` ulps of max|expected|, elementwise (float32).

    For float features computed now against ones stored by another machine; within one machine
    compare bits (`bits`) instead.
    """
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert actual.shape == expected.shape, (err_msg, actual.shape, expected.shape)
    error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bound = scale_bound(expected, ulps=ulps)
    assert np.all(error <= bound), f"{err_msg}: max error {error.max():.3g} > {bound:.3g}"


def bits(x: np.ndarray) -> np.ndarray:
    """The bit patterns of float32 values (assert_array_equal treats -0.0 as 0.0)."""
    return np.ascontiguousarray(x, np.float32).view(np.uint32)
