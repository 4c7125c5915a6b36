"""Per-window audio features (spectrogram, log-mel, MFCC) with tf.signal semantics.

Two implementations of the same computation:

- `compute_features_numpy`: frames are strided views of the windows
  (`np.lib.stride_tricks.sliding_window_view`), `scipy.fft.rfft` in float32, products with the
  mel matrix and a DCT-II matrix; blocks of ~`_BLOCK_FRAMES` frames through preallocated
  buffers, so memory stays bounded for any chunk size. No tensorflow import. Every window's
  values are computed alone, whatever windows share the call: the products go through
  `_RowProduct` (scipy.sparse: each output value one fixed sequence of multiply-adds), not BLAS,
  whose float32 rounding of a row depends on how many rows the call has and where the row sits
  in it (docs/performance.md: most clips' log_mel differed between a run that computed them one
  file at a time and one that packed files; the same speed).
- `features_tf.compute_features_tf`: `tf.signal.stft` / `tf.signal.mfccs_from_log_mel_spectrograms`
  in the graph of `features_tf.tf_feature_module` (the exported serving graph: raw audio ->
  features), in a module of its own so that this one never imports tensorflow.

Accuracy of both, against a float64 computation of the same formulas (checked on real
recordings, the 64 kHz hydrophone excerpt and the bundled sample, by
tests/unit/test_features_real.py). float32 FFT rounding is relative to the frame's largest value,
not to each bin, so quiet bands carry large relative errors, and the log turns them into large
absolute ones. The two paths do NOT agree to float32 rounding of each value:

- spectrogram: within 1e-6 x the frame's largest bin;
- log_mel: mel energies within 1e-6 x the frame's largest mel energy, i.e. a log_mel error of at
  most 1e-6 x peak / (mel + log_offset): ~1e-6 near the peak, 1e-4 in a band 100x weaker;
- mfcc: at most sqrt(2 / num_mel_bins) x the sum of the frame's log_mel bounds.

(The errors measured on the real recordings: docs/performance.md.) `compute_features`, what the
Beam pipeline calls, is the numpy path: faster than the tf path in every setting measured
(`benchmarks/features_numpy_vs_tf.py`).

The mel matrix is a numpy port of `tf.signal.linear_to_mel_weight_matrix` (HTK mel scale
mel(f) = 1127 ln(1 + f / 700), triangles in mel space, DC bin zeroed) computed in float64 and
rounded once to float32. Both paths use this same constant (the tf graph embeds it), so the
pipeline and the serving graph share it bit for bit and the numpy worker never imports
tensorflow. tf.signal's own float32 computation of the matrix differs from it by up to ~2e-5
absolute per weight (1.9e-5 with 128 bins at 44.1 kHz: float32 rounding of mel values near 3000
divided by band widths of ~40 mel); tests check 2e-5. The MFCC scaling is tf's: DCT-II times
sqrt(2 / num_mel_bins) for every coefficient (orthonormal except coefficient 0, which is sqrt(2)
larger).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
import scipy.fft
import scipy.sparse

SPECTROGRAM = "spectrogram"
LOG_MEL = "log_mel"
MFCC = "mfcc"
FEATURE_NAMES = (SPECTROGRAM, LOG_MEL, MFCC)

# Frames per block of the numpy path: ~10 windows of 98 frames, ~2 MB of FFT buffers that stay in
# cache (measured faster than blocks several times larger).
_BLOCK_FRAMES = 1024


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    """Which features to compute and how (tf.signal parameters; lengths in samples).

    Attributes:
      names: subset of FEATURE_NAMES, in output order (a list or one str becomes a tuple).
      frame_length: STFT frame length (25 ms at 16 kHz); periodic Hann window of this length.
      frame_step: hop between frames (10 ms at 16 kHz).
      fft_length: rFFT size (>= frame_length; frames are zero-padded at the end).
      num_mel_bins: mel bands of log_mel (and the DCT input size of mfcc).
      lower_edge_hz: lower edge of the lowest mel band.
      upper_edge_hz: upper edge of the highest mel band; None means sample_rate / 2.
      num_mfccs: leading DCT coefficients kept for mfcc.
      log_offset: added to mel energies before the log (so silence gives log(log_offset)).
    """

    names: tuple[str, ...] = ()
    frame_length: int = 400
    frame_step: int = 160
    fft_length: int = 512
    num_mel_bins: int = 64
    lower_edge_hz: float = 20.0
    upper_edge_hz: float | None = None
    num_mfccs: int = 13
    log_offset: float = 1e-6

    def __post_init__(self) -> None:  # hashable (an lru_cache key) even when given a list / str
        names = (self.names,) if isinstance(self.names, str) else tuple(self.names)
        object.__setattr__(self, "names", names)

    def upper_edge(self, sample_rate: float) -> float:
        """The upper mel edge in Hz for `sample_rate` (upper_edge_hz, or the Nyquist frequency)."""
        return sample_rate / 2.0 if self.upper_edge_hz is None else float(self.upper_edge_hz)

    def validate(self, *, win_len: int, sample_rate: int) -> None:
        """Raise ValueError (one line, naming the parameter) unless features can be computed.

        Frame parameters are always checked; mel parameters only when log_mel or mfcc is
        requested, num_mfccs only when mfcc is (sample rates can differ per file).

        Args:
          win_len: samples per window.
          sample_rate: samples per second of the windows.
        """
        unknown = [n for n in self.names if n not in FEATURE_NAMES]
        if unknown:
            raise ValueError(f"FeatureConfig.names: unknown {unknown}; expected {FEATURE_NAMES}")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"FeatureConfig.names: duplicates in {self.names}")
        _check_positive_int("win_len", win_len)
        _check_positive("sample_rate", sample_rate)
        for field in ("frame_length", "frame_step", "fft_length"):
            _check_positive_int(f"FeatureConfig.{field}", getattr(self, field))
        if self.frame_length > win_len:
            raise ValueError(
                f"FeatureConfig.frame_length={self.frame_length} exceeds win_len={win_len}"
            )
        if self.fft_length < self.frame_length:
            raise ValueError(
                f"FeatureConfig.fft_length={self.fft_length} is smaller than "
                f"frame_length={self.frame_length}"
            )
        if LOG_MEL not in self.names and MFCC not in self.names:
            return
        _check_positive_int("FeatureConfig.num_mel_bins", self.num_mel_bins)
        _check_positive("FeatureConfig.log_offset", self.log_offset)
        nyquist = sample_rate / 2.0
        lower, upper = self.lower_edge_hz, self.upper_edge(sample_rate)
        if not (isinstance(lower, int | float) and 0.0 <= lower < nyquist):
            raise ValueError(
                f"FeatureConfig.lower_edge_hz={lower!r} outside [0, {nyquist:g}) "
                f"(sample_rate={sample_rate})"
            )
        if not (isinstance(upper, int | float) and lower < upper <= nyquist):
            raise ValueError(
                f"FeatureConfig.upper_edge_hz={upper!r} outside (lower_edge_hz={lower:g}, "
                f"{nyquist:g}] (sample_rate={sample_rate})"
            )
        if MFCC in self.names:
            _check_positive_int("FeatureConfig.num_mfccs", self.num_mfccs)
            if self.num_mfccs > self.num_mel_bins:
                raise ValueError(
                    f"FeatureConfig.num_mfccs={self.num_mfccs} exceeds "
                    f"num_mel_bins={self.num_mel_bins}"
                )


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def _check_positive(name: str, value: Any) -> None:
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive number")


def feature_shapes(
    config: FeatureConfig, *, win_len: int, sample_rate: int
) -> dict[str, tuple[int, ...]]:
    """Per-window shape of each requested feature, in `config.names` order.

    Args:
      config: the features; validated first (ValueError).
      win_len: samples per window.
      sample_rate: samples per second.

    Returns:
      {name: (num_frames, bins)}: num_frames = 1 + (win_len - frame_length) // frame_step; bins
      fft_length // 2 + 1 (spectrogram), num_mel_bins (log_mel), num_mfccs (mfcc).
    """
    config.validate(win_len=win_len, sample_rate=sample_rate)  # cheap; not cached: 400 == 400.0
    num_frames = 1 + (win_len - config.frame_length) // config.frame_step
    bins = {
        SPECTROGRAM: config.fft_length // 2 + 1,
        LOG_MEL: config.num_mel_bins,
        MFCC: config.num_mfccs,
    }
    return {name: (num_frames, bins[name]) for name in config.names}


# --- constants, cached per parameters ----------------------------------------------------------


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@functools.lru_cache(maxsize=32)
def periodic_hann_window(frame_length: int) -> np.ndarray:
    """float32 [frame_length]: 0.5 - 0.5 cos(2 pi n / frame_length) (tf.signal.hann_window)."""
    n = np.arange(frame_length, dtype=np.float64)
    return _read_only((0.5 - 0.5 * np.cos(2.0 * np.pi * n / frame_length)).astype(np.float32))


@functools.lru_cache(maxsize=32)
def mel_weight_matrix(
    *,
    num_mel_bins: int,
    num_spectrogram_bins: int,
    sample_rate: float,
    lower_edge_hz: float,
    upper_edge_hz: float,
) -> np.ndarray:
    """float32 [num_spectrogram_bins, num_mel_bins]: tf.signal.linear_to_mel_weight_matrix.

    Same formula (HTK mel scale, triangles in mel space, DC row zero), computed in float64.
    """
    linear_hz = np.linspace(0.0, sample_rate / 2.0, num_spectrogram_bins)[1:]
    spectrogram_mel = _hz_to_mel(linear_hz)[:, np.newaxis]
    edges = np.linspace(_hz_to_mel(lower_edge_hz), _hz_to_mel(upper_edge_hz), num_mel_bins + 2)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    lower_slopes = (spectrogram_mel - lower) / (center - lower)
    upper_slopes = (upper - spectrogram_mel) / (upper - center)
    weights = np.maximum(0.0, np.minimum(lower_slopes, upper_slopes))
    return _read_only(np.pad(weights, [(1, 0), (0, 0)]).astype(np.float32))


def _hz_to_mel(hz: Any) -> Any:
    return 1127.0 * np.log1p(np.asarray(hz, dtype=np.float64) / 700.0)


@functools.lru_cache(maxsize=32)
def mfcc_dct_matrix(*, num_mel_bins: int, num_mfccs: int) -> np.ndarray:
    """float32 [num_mel_bins, num_mfccs]: log_mel @ it == tf.signal's mfccs[..., :num_mfccs].

    D[n, k] = sqrt(2 / N) cos(pi k (2n + 1) / (2N)), N = num_mel_bins: tf's unnormalised
    DCT-II (2 sum ...) times rsqrt(2N).
    """
    n = np.arange(num_mel_bins, dtype=np.float64)[:, np.newaxis]
    k = np.arange(num_mfccs, dtype=np.float64)[np.newaxis, :]
    dct = np.sqrt(2.0 / num_mel_bins) * np.cos(np.pi * k * (2.0 * n + 1.0) / (2.0 * num_mel_bins))
    return _read_only(dct.astype(np.float32))


class _RowProduct:
    """``x @ matrix`` for float32 [rows, k] `x`, each row's values computed alone.

    Each output value is one sequence of multiply-adds over the matrix column's nonzeros, in
    their order (scipy.sparse's CSR product: ``y[i] += w * x[j]``, element by element), so a
    row's result does not depend on the other rows in the call; a BLAS product's does (its
    kernels and blocking change with the row count and a row's place in the block). The mel
    matrix is mostly zeros, so this is as fast as BLAS here (docs/performance.md).
    """

    def __init__(self, matrix: np.ndarray):
        self._t = scipy.sparse.csr_array(np.ascontiguousarray(matrix.T, dtype=np.float32))

    def __call__(self, x: np.ndarray, *, out: np.ndarray) -> None:
        """out[...] = x @ matrix; `x` float32 [rows, k], `out` float32 [rows, n]."""
        out[...] = (self._t @ np.ascontiguousarray(x.T)).T


@functools.lru_cache(maxsize=32)
def _mel_product(config: FeatureConfig, sample_rate: float) -> _RowProduct:
    return _RowProduct(mel_matrix_for(config, sample_rate))


@functools.lru_cache(maxsize=32)
def _dct_product(*, num_mel_bins: int, num_mfccs: int) -> _RowProduct:
    return _RowProduct(mfcc_dct_matrix(num_mel_bins=num_mel_bins, num_mfccs=num_mfccs))


def mel_matrix_for(config: FeatureConfig, sample_rate: float) -> np.ndarray:
    """`config`'s float32 [fft_length // 2 + 1, num_mel_bins] mel matrix at `sample_rate`."""
    return mel_weight_matrix(
        num_mel_bins=config.num_mel_bins,
        num_spectrogram_bins=config.fft_length // 2 + 1,
        sample_rate=float(sample_rate),
        lower_edge_hz=float(config.lower_edge_hz),
        upper_edge_hz=config.upper_edge(sample_rate),
    )


def as_waveforms(waveforms: Any) -> np.ndarray:
    """`waveforms` as C-contiguous float32 [n, win_len]; ValueError / TypeError otherwise."""
    array = np.asarray(waveforms)
    if array.ndim != 2:
        raise ValueError(f"waveforms must be [n, win_len]; got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(f"waveforms must be float scaled to [-1, 1); got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float32)


# --- the two paths ------------------------------------------------------------------------------


def compute_features(
    waveforms: np.ndarray, *, sample_rate: int, config: FeatureConfig
) -> dict[str, np.ndarray]:
    """Features of a chunk of windows: the pipeline's entry point (the numpy path, see above).

    Args:
      waveforms: float [n, win_len] windows scaled to [-1, 1); n may be 0.
      sample_rate: samples per second.
      config: the features (validated; ValueError).

    Returns:
      {name: float32 [n, num_frames, bins]} in `config.names` order (see `feature_shapes`).
    """
    return compute_features_numpy(waveforms, sample_rate=sample_rate, config=config)


def compute_features_numpy(
    waveforms: np.ndarray, *, sample_rate: int, config: FeatureConfig
) -> dict[str, np.ndarray]:
    """`compute_features` with numpy/scipy (no tensorflow). Same arguments and result."""
    x = as_waveforms(waveforms)
    n, win_len = x.shape
    shapes = feature_shapes(config, win_len=win_len, sample_rate=sample_rate)
    out = {name: np.empty((n, *shape), dtype=np.float32) for name, shape in shapes.items()}
    if n == 0 or not out:
        return out
    length, step, fft_length = config.frame_length, config.frame_step, config.fft_length
    num_frames, num_bins = 1 + (win_len - length) // step, fft_length // 2 + 1
    need_mel = LOG_MEL in out or MFCC in out
    window = periodic_hann_window(length)
    mel = _mel_product(config, float(sample_rate)) if need_mel else None
    dct = None
    if MFCC in out:
        dct = _dct_product(num_mel_bins=config.num_mel_bins, num_mfccs=config.num_mfccs)

    block = min(n, max(1, _BLOCK_FRAMES // num_frames))
    padded = np.zeros((block, num_frames, fft_length), dtype=np.float32)  # tail stays zero
    magnitude_buf = None if SPECTROGRAM in out else np.empty((block, num_frames, num_bins), "f4")
    log_mel_buf = None
    if MFCC in out and LOG_MEL not in out:
        log_mel_buf = np.empty((block, num_frames, config.num_mel_bins), np.float32)
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = stop - start
        frames = np.lib.stride_tricks.sliding_window_view(x[start:stop], length, axis=-1)[
            :, ::step
        ]  # [rows, num_frames, frame_length], a view
        np.multiply(frames, window, out=padded[:rows, :, :length])
        spectrum = scipy.fft.rfft(padded[:rows], axis=-1)  # complex64 [rows, frames, bins]
        if SPECTROGRAM in out:
            magnitude = out[SPECTROGRAM][start:stop]
        else:
            magnitude = magnitude_buf[:rows]
        np.abs(spectrum, out=magnitude)
        if not need_mel:
            continue
        log_mel = out[LOG_MEL][start:stop] if LOG_MEL in out else log_mel_buf[:rows]
        log_mel_2d = log_mel.reshape(-1, config.num_mel_bins)  # a view: both are C-contiguous
        mel(magnitude.reshape(-1, num_bins), out=log_mel_2d)
        log_mel_2d += np.float32(config.log_offset)
        np.log(log_mel_2d, out=log_mel_2d)
        if MFCC in out:
            mfcc_2d = out[MFCC][start:stop].reshape(-1, config.num_mfccs)
            dct(log_mel_2d, out=mfcc_2d)
    return out
