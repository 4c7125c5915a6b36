"""Tests of transforms.audio.features against an independent float64 reference and tf.signal.
The tf.signal graph of the same features (`transforms.audio.features_tf`) against this numpy
path: test_features_tf.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.support.feature_cases import (
    CASES,
    CONFIG,
    SR,
    WIN_LEN,
    assert_close,
    make_waveforms,
)
from transforms.audio import features, features_tf
from transforms.audio.features import FEATURE_NAMES, FeatureConfig

# --- the independent reference: float64 loops over the textbook formulas -----------------------


def _reference(waveforms: np.ndarray, sample_rate: int, cfg: FeatureConfig) -> dict:
    """{name: float64 [n, frames, bins]} from per-frame rFFTs, an HTK filterbank and a DCT-II."""
    length, step, nfft = cfg.frame_length, cfg.frame_step, cfg.fft_length
    n_frames = 1 + (waveforms.shape[1] - length) // step
    hann = np.array([0.5 - 0.5 * np.cos(2 * np.pi * i / length) for i in range(length)])
    spec = np.array(
        [
            [
                np.abs(np.fft.rfft(w[f * step : f * step + length] * hann, n=nfft))
                for f in range(n_frames)
            ]
            for w in waveforms.astype(np.float64)
        ]
    ).reshape(len(waveforms), n_frames, nfft // 2 + 1)

    def mel(hz: float) -> float:
        return 1127.0 * np.log(1.0 + hz / 700.0)

    upper_hz = sample_rate / 2 if cfg.upper_edge_hz is None else cfg.upper_edge_hz
    lo, hi, m = mel(cfg.lower_edge_hz), mel(upper_hz), cfg.num_mel_bins
    edges = [lo + (hi - lo) * i / (m + 1) for i in range(m + 2)]  # m + 2 points equally in mel
    bank = np.zeros((nfft // 2 + 1, m))
    for k in range(1, nfft // 2 + 1):  # k = 0 (DC) stays zero, as in HTK / tf
        bin_mel = mel(k * (sample_rate / 2) / (nfft // 2))
        for j in range(m):
            left, center, right = edges[j : j + 3]
            rising = (bin_mel - left) / (center - left)
            falling = (right - bin_mel) / (right - center)
            bank[k, j] = max(0.0, min(rising, falling))
    log_mel = np.log(spec @ bank + cfg.log_offset)

    # Orthonormal DCT-II: c_k = sqrt((1 if k == 0 else 2) / M) sum_n x_n cos(pi k (2n + 1) / 2M).
    # tf.signal.mfccs_from_log_mel_spectrograms scales every coefficient by sqrt(2 / M), i.e.
    # orthonormal except c_0, which is sqrt(2) larger.
    dct = np.array(
        [
            [
                np.sqrt((1 if k == 0 else 2) / m) * np.cos(np.pi * k * (2 * i + 1) / (2 * m))
                for k in range(m)
            ]
            for i in range(m)
        ]
    )
    dct[:, 0] *= np.sqrt(2.0)
    mfcc = (log_mel @ dct)[..., : cfg.num_mfccs]
    return {"spectrogram": spec, "log_mel": log_mel, "mfcc": mfcc}


@pytest.fixture(scope="module", params=list(CASES))
def case(request) -> tuple[FeatureConfig, int, np.ndarray]:
    cfg, sample_rate, win_len = CASES[request.param]
    return cfg, sample_rate, make_waveforms(7, win_len, sample_rate)


def test_compute_features_matches_independent_reference(case) -> None:
    cfg, sample_rate, waveforms = case
    got = features.compute_features(waveforms, sample_rate=sample_rate, config=cfg)
    ref = _reference(waveforms, sample_rate, cfg)
    want = {name: ref[name] for name in cfg.names}
    assert_close(got, want, num_mel_bins=cfg.num_mel_bins, rtol=1e-4, log_atol=1e-4)


def test_mel_matrix_matches_tf_signal() -> None:
    """The numpy port (float64) is within tf.signal's own float32 rounding (~1e-5 a weight)."""
    import tensorflow as tf

    for mel_bins, spec_bins, sample_rate, lower, upper in [
        (64, 257, 16000, 20.0, 8000.0),
        (40, 201, 22050, 0.0, 7000.0),
        (128, 1025, 44100, 30.0, 22050.0),
        (20, 129, 8000, 125.0, 3800.0),
    ]:
        want = tf.signal.linear_to_mel_weight_matrix(mel_bins, spec_bins, sample_rate, lower, upper)
        got = features.mel_weight_matrix(
            num_mel_bins=mel_bins,
            num_spectrogram_bins=spec_bins,
            sample_rate=sample_rate,
            lower_edge_hz=lower,
            upper_edge_hz=upper,
        )
        np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-5)
        assert not got[0].any()  # DC row zero


@pytest.mark.parametrize("compute", ["compute_features_numpy", "compute_features_tf"])
def test_blocking_is_invisible(compute, monkeypatch) -> None:
    """Chunks larger than one block (with a partial last block) give the same features."""
    waveforms = make_waveforms(7, WIN_LEN, SR, seed=1)
    fn = getattr(features_tf if compute == "compute_features_tf" else features, compute)
    whole = fn(waveforms, sample_rate=SR, config=CONFIG)
    monkeypatch.setattr(features, "_BLOCK_FRAMES", 3 * 8)  # 3 windows of 8 frames a block
    monkeypatch.setattr(features_tf, "_TF_BLOCK_FRAMES", 3 * 8)
    features_tf._cached_tf_module.cache_clear()
    blocked = fn(waveforms, sample_rate=SR, config=CONFIG)
    for name in FEATURE_NAMES:
        np.testing.assert_allclose(blocked[name], whole[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_a_windows_features_do_not_depend_on_the_windows_computed_with_it() -> None:
    """Bit for bit, a window's features are the same whatever call computes it: alone, among
    any number of others, at any place, across block ends. The record job relies on it: packs of
    short files and read tasks cut a corpus differently on each runner, and the shards must be
    byte-identical. (A BLAS matrix product rounds a row depending on the call's row count and
    the row's place: 826 of 1,000 clips' log_mel differed between two runners on an AMD EPYC.)
    """
    waveforms = make_waveforms(70, WIN_LEN, SR, seed=4)
    whole = features.compute_features_numpy(waveforms, sample_rate=SR, config=CONFIG)
    for start, stop in [(0, 1), (1, 2), (5, 6), (69, 70), (0, 3), (3, 20), (17, 50), (1, 70)]:
        part = features.compute_features_numpy(waveforms[start:stop], sample_rate=SR, config=CONFIG)
        for name in FEATURE_NAMES:
            assert part[name].tobytes() == whole[name][start:stop].tobytes(), (name, start, stop)


@pytest.mark.parametrize("cfg,sample_rate,win_len", list(CASES.values()), ids=list(CASES))
def test_shapes_match_feature_shapes(cfg, sample_rate, win_len) -> None:
    shapes = features.feature_shapes(cfg, win_len=win_len, sample_rate=sample_rate)
    assert list(shapes) == list(cfg.names)
    for n in (0, 3):
        waveforms = make_waveforms(max(n, 3), win_len, sample_rate)[:n]
        for fn in (features.compute_features_numpy, features_tf.compute_features_tf):
            out = fn(waveforms, sample_rate=sample_rate, config=cfg)
            assert list(out) == list(cfg.names)
            assert {k: v.shape for k, v in out.items()} == {k: (n, *s) for k, s in shapes.items()}
            assert all(v.dtype == np.float32 for v in out.values())


def test_feature_shapes_values() -> None:
    shapes = features.feature_shapes(CONFIG, win_len=16000, sample_rate=16000)
    assert shapes == {"spectrogram": (98, 257), "log_mel": (98, 64), "mfcc": (98, 13)}
    only = FeatureConfig(names=["log_mel"], frame_length=400, frame_step=400)  # list -> tuple
    assert only.names == ("log_mel",) and hash(only)
    assert FeatureConfig(names="mfcc").names == ("mfcc",)
    assert features.feature_shapes(only, win_len=1600, sample_rate=SR) == {"log_mel": (4, 64)}
    assert (
        features.compute_features(
            make_waveforms(3, 1600, SR), sample_rate=SR, config=FeatureConfig()
        )
        == {}
    )


def test_constants_are_cached_and_read_only() -> None:
    kwargs = dict(
        num_mel_bins=64,
        num_spectrogram_bins=257,
        sample_rate=16000.0,
        lower_edge_hz=20.0,
        upper_edge_hz=8000.0,
    )
    assert features.mel_weight_matrix(**kwargs) is features.mel_weight_matrix(**kwargs)
    assert features.periodic_hann_window(400) is features.periodic_hann_window(400)
    dct = features.mfcc_dct_matrix(num_mel_bins=64, num_mfccs=13)
    assert dct is features.mfcc_dct_matrix(num_mel_bins=64, num_mfccs=13)
    with pytest.raises(ValueError):
        dct[0, 0] = 1.0


def test_rejects_bad_waveforms() -> None:
    with pytest.raises(TypeError, match="float"):
        features.compute_features(np.zeros((2, WIN_LEN), np.int16), sample_rate=SR, config=CONFIG)
    with pytest.raises(ValueError, match="n, win_len"):
        features.compute_features(np.zeros(WIN_LEN, np.float32), sample_rate=SR, config=CONFIG)


@pytest.mark.parametrize(
    "changes,win_len,sample_rate,message",
    [
        ({"names": ("log_mel", "mel")}, 16000, SR, "names"),
        ({"names": ("mfcc", "mfcc")}, 16000, SR, "names"),
        ({}, 0, SR, "win_len"),
        ({}, 16000, 0, "sample_rate"),
        ({"frame_length": 0}, 16000, SR, "frame_length"),
        ({"frame_length": 400.0}, 16000, SR, "frame_length"),
        ({"frame_length": 16001, "fft_length": 16384}, 16000, SR, "frame_length"),
        ({"frame_step": -160}, 16000, SR, "frame_step"),
        ({"fft_length": 256}, 16000, SR, "fft_length"),
        ({"num_mel_bins": 0}, 16000, SR, "num_mel_bins"),
        ({"lower_edge_hz": -1.0}, 16000, SR, "lower_edge_hz"),
        ({"lower_edge_hz": 8000.0}, 16000, SR, "lower_edge_hz"),
        ({"upper_edge_hz": 8001.0}, 16000, SR, "upper_edge_hz"),
        ({"lower_edge_hz": 4000.0, "upper_edge_hz": 3000.0}, 16000, SR, "upper_edge_hz"),
        ({"upper_edge_hz": 8000.0}, 16000, 8000, "upper_edge_hz"),
        ({"num_mfccs": 0}, 16000, SR, "num_mfccs"),
        ({"num_mfccs": 65}, 16000, SR, "num_mfccs"),
        ({"log_offset": 0.0}, 16000, SR, "log_offset"),
    ],
)
def test_validate_rejects(changes, win_len, sample_rate, message) -> None:
    cfg = dataclasses.replace(CONFIG, **changes)
    with pytest.raises(ValueError, match=message) as info:
        cfg.validate(win_len=win_len, sample_rate=sample_rate)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=message):  # and before any work is done
        features.feature_shapes(cfg, win_len=win_len, sample_rate=sample_rate)


def test_validate_accepts() -> None:
    CONFIG.validate(win_len=400, sample_rate=SR)  # one frame
    dataclasses.replace(CONFIG, upper_edge_hz=8000.0, lower_edge_hz=0.0).validate(
        win_len=400, sample_rate=SR
    )
    # mel / mfcc parameters only matter when those features are requested
    spectrogram = FeatureConfig(names=("spectrogram",), num_mfccs=100, upper_edge_hz=8000.0)
    spectrogram.validate(win_len=16000, sample_rate=8000)
    with pytest.raises(ValueError, match="empty"):
        features_tf.tf_feature_module(FeatureConfig(), win_len=16000, sample_rate=SR)
