"""An independent float64 computation of the features, and the accuracy bound features.py states.

`reference_features` recomputes spectrogram / log-mel / MFCC from the textbook formulas in
float64 (numpy's FFT, an HTK filterbank and a DCT-II written here, nothing from
`transforms.audio.features`). `assert_within_stated_bound` checks a float32 result against it
with the bound of the `transforms.audio.features` docstring: float32 rounding of the spectrum is
relative to the frame's largest value, so a bin far below the frame's peak has a large *relative*
error, which the log of log_mel turns into a large absolute one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from transforms.audio.features import FeatureConfig

# Stated in transforms/audio/features.py: each path is within PEAK_RTOL x the frame's largest
# value of the float64 result, for the spectrum and for the mel energies.
PEAK_RTOL = 1e-6
_U32 = 2.0**-24  # float32 unit roundoff


def _hz_to_mel(hz):
    return 1127.0 * np.log(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def reference_features(waveforms: np.ndarray, *, sample_rate: float, config: FeatureConfig) -> dict:
    """{"spectrogram", "mel", "log_mel", "mfcc": float64 [n, frames, bins]} of [n, win_len]."""
    length, step, nfft = config.frame_length, config.frame_step, config.fft_length
    x = np.asarray(waveforms, dtype=np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(x, length, axis=-1)[:, ::step]
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)  # periodic
    spectrogram = np.abs(np.fft.rfft(frames * hann, n=nfft, axis=-1))
    upper = sample_rate / 2.0 if config.upper_edge_hz is None else config.upper_edge_hz
    m = config.num_mel_bins
    edges = np.linspace(_hz_to_mel(config.lower_edge_hz), _hz_to_mel(upper), m + 2)
    bin_mel = _hz_to_mel(np.arange(nfft // 2 + 1) * (sample_rate / 2.0) / (nfft // 2))[:, None]
    rising = (bin_mel - edges[:-2]) / (edges[1:-1] - edges[:-2])
    falling = (edges[2:] - bin_mel) / (edges[2:] - edges[1:-1])
    bank = np.maximum(0.0, np.minimum(rising, falling))
    bank[0] = 0.0  # DC carries no weight (HTK, tf.signal)
    mel = spectrogram @ bank
    log_mel = np.log(mel + config.log_offset)
    n = np.arange(m)[:, None]
    k = np.arange(config.num_mfccs)[None, :]
    dct = np.sqrt(2.0 / m) * np.cos(np.pi * k * (2 * n + 1) / (2 * m))  # tf.signal's scaling
    return {"spectrogram": spectrogram, "mel": mel, "log_mel": log_mel, "mfcc": log_mel @ dct}


def stated_tolerances(reference: Mapping[str, np.ndarray], *, config: FeatureConfig) -> dict:
    """{name: float64 tolerance, same shape}: the bound of the features.py docstring.

    spectrogram: PEAK_RTOL x the frame's largest bin.
    log_mel: a mel-energy error of PEAK_RTOL x the frame's largest mel energy, through the log:
      PEAK_RTOL x peak / (mel + log_offset), plus float32 rounding of the value itself.
    mfcc: the DCT's weights (|w| <= sqrt(2 / M)) times the log_mel tolerances summed over the
      frame's M bins, plus the float32 dot product's own rounding bound (M u sum |w| |log_mel|).
    """
    spec, mel, log_mel = reference["spectrogram"], reference["mel"], reference["log_mel"]
    m, weight = config.num_mel_bins, np.sqrt(2.0 / config.num_mel_bins)
    mel_error = PEAK_RTOL * mel.max(axis=-1, keepdims=True)
    log_mel_tol = mel_error / (mel + config.log_offset) + 2 * _U32 * np.abs(log_mel)
    frame_sum = (log_mel_tol.sum(axis=-1) + m * _U32 * np.abs(log_mel).sum(axis=-1)) * weight
    return {
        "spectrogram": np.broadcast_to(PEAK_RTOL * spec.max(axis=-1, keepdims=True), spec.shape),
        "log_mel": log_mel_tol,
        "mfcc": np.broadcast_to(frame_sum[..., None], reference["mfcc"].shape),
    }


def worst_ratio(
    got: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], *, config: FeatureConfig
) -> dict[str, float]:
    """{name: max |got - reference| / tolerance} over the names in `got` (<= 1: within bound)."""
    tolerances = stated_tolerances(reference, config=config)
    out = {}
    for name, value in got.items():
        error = np.abs(np.asarray(value, dtype=np.float64) - reference[name])
        tolerance = tolerances[name]
        out[name] = float(np.max(np.where(error == 0, 0.0, error / np.maximum(tolerance, 1e-300))))
    return out


def assert_within_stated_bound(
    got: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    *,
    config: FeatureConfig,
    what: str = "",
) -> None:
    """Assert every value of `got` (float32 features) is within `stated_tolerances`."""
    tolerances = stated_tolerances(reference, config=config)
    for name, value in got.items():
        value = np.asarray(value)
        assert value.dtype == np.float32 and value.shape == reference[name].shape, (what, name)
        error = np.abs(value.astype(np.float64) - reference[name])
        excess = error > tolerances[name]
        if excess.any():
            i = np.unravel_index(
                np.argmax(error / np.maximum(tolerances[name], 1e-300)), error.shape
            )
            raise AssertionError(
                f"{what} {name}: {excess.sum()} of {excess.size} values beyond the stated bound; "
                f"worst at {i}: {value[i]} vs float64 {reference[name][i]} "
                f"(error {error[i]:.3g}, bound {tolerances[name][i]:.3g})"
            )
