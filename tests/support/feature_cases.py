"""The feature tests' inputs and comparison: two feature configurations (the defaults, and odd
sizes everywhere) with their sample rates and window lengths, seeded waveforms (tones and noise,
a silent and a clipped window), and a closeness check with per-feature error floors."""

from __future__ import annotations

import numpy as np

from transforms.audio.features import FEATURE_NAMES, FeatureConfig

SR = 16000
WIN_LEN = 1600  # 100 ms: 8 frames of 400 every 160, enough for the loops of the reference
CONFIG = FeatureConfig(names=FEATURE_NAMES)
# Odd sizes everywhere: other sample rate, fft_length > frame_length, edges inside the band.
ODD_CONFIG = FeatureConfig(
    names=("mfcc", "spectrogram"),
    frame_length=300,
    frame_step=128,
    fft_length=400,
    num_mel_bins=40,
    lower_edge_hz=0.0,
    upper_edge_hz=7000.0,
    num_mfccs=20,
    log_offset=1e-3,
)
ODD_SR = 22050
ODD_WIN_LEN = 2205


def make_waveforms(n: int, win_len: int, sample_rate: int, seed: int = 0) -> np.ndarray:
    """float32 [n >= 3, win_len]: tones + noise at random levels; window 1 silent, 2 clipped."""
    rng = np.random.default_rng(seed)
    t = np.arange(win_len) / sample_rate
    x = np.stack(
        [
            rng.uniform(0.05, 0.5) * np.sin(2 * np.pi * rng.uniform(50, 4000) * t)
            + rng.uniform(0.001, 0.1) * rng.standard_normal(win_len)
            for _ in range(n)
        ]
    )
    x[1] = 0.0
    x[2] = np.clip(x[2] * 50, -1.0, 1.0 - 2**-15)
    return x.astype(np.float32)


def assert_close(
    actual: dict, expected: dict, *, num_mel_bins: int, rtol: float, log_atol: float
) -> None:
    """Assert |actual - expected| <= rtol * |expected| + floor for every feature.

    The absolute floors (assert_allclose's atol, here per frame where that is what is justified):
    spectrogram: float32 FFT rounding is relative to the frame's energy, not to each bin (bins
      in the Hann sidelobes are ~1e-6 of the peak), so the floor is rtol * the frame's largest
      bin (0 for a silent frame, which must then be exactly 0).
    log_mel: near log(x) = 0 a relative tolerance is meaningless; an absolute error e in the log
      domain is a relative error e of the mel energy, so the floor is log_atol.
    mfcc: a DCT-II row of M = num_mel_bins weights of size sqrt(2 / M) turns log_mel errors of
      at most log_atol into at most sqrt(2 / M) * M * log_atol = sqrt(2 M) * log_atol.
    """
    assert list(actual) == list(expected)
    for name, want in expected.items():
        got, want = actual[name], np.asarray(want, dtype=np.float64)
        assert got.dtype == np.float32 and got.shape == want.shape, name
        if name == "spectrogram":
            floor = rtol * np.abs(want).max(axis=-1, keepdims=True)
        else:
            floor = log_atol * (np.sqrt(2 * num_mel_bins) if name == "mfcc" else 1.0)
        error = np.abs(got - want)
        excess = error > rtol * np.abs(want) + floor
        assert not excess.any(), (
            f"{name}: {excess.sum()} of {excess.size} values off; worst at "
            f"{np.unravel_index(np.argmax(error), error.shape)}: {got.flat[np.argmax(error)]} vs "
            f"{want.flat[np.argmax(error)]}"
        )


CASES = {
    "default": (CONFIG, SR, WIN_LEN),
    "odd": (ODD_CONFIG, ODD_SR, ODD_WIN_LEN),
}
