"""The accuracy transforms.audio.features states, on real recordings: both paths (numpy, what the
pipeline stores; tf.signal, what feature_fn/ serves) against an independent float64 computation.

Real audio is where the bound matters: bands 40-60 dB below the frame's peak (the hydrophone's
high frequencies at 64 kHz) have float32 errors relative to the frame, not to themselves, which
the log turns into absolute log_mel errors of ~5e-4: far beyond "float32 rounding" per value.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
import soundfile as sf

from tests.support.feature_reference import assert_within_stated_bound, reference_features
from tests.support.record_helpers import SAMPLE_DIR, TUG_WAV
from transforms.audio import features, features_tf
from transforms.audio.features import FEATURE_NAMES, FeatureConfig

WIN_LEN = 16000
CONFIGS = {
    "default": FeatureConfig(names=FEATURE_NAMES),
    "small_frames": FeatureConfig(
        names=FEATURE_NAMES,
        frame_length=256,
        frame_step=128,
        fft_length=256,
        num_mel_bins=40,
        num_mfccs=20,
    ),
}


def _windows(x: np.ndarray, hop: int) -> np.ndarray:
    starts = range(0, len(x) - WIN_LEN + 1, hop)
    return np.stack([x[s : s + WIN_LEN] for s in starts]).astype(np.float32)


def _recordings() -> dict[str, tuple[np.ndarray, int]]:
    """{name: (float32 [n, WIN_LEN] windows in [-1, 1), sample rate)} of the real recordings."""
    tug, rate = sf.read(TUG_WAV, dtype="float64")  # 24-bit, 64 kHz, 5 s
    sample = np.concatenate(
        [sf.read(p, dtype="float64")[0] for p in sorted(SAMPLE_DIR.glob("*.wav"))]
    )
    return {
        "tug_64k": (_windows(tug, 8000), rate),
        "tug_16k": (_windows(scipy.signal.resample_poly(tug, 1, 4), 4000), 16000),
        "tug_22k": (_windows(scipy.signal.resample_poly(tug, 441, 1280), 4000), 22050),
        "sample_16k": (_windows(sample, 8000), 16000),
    }


@pytest.fixture(scope="module")
def recordings() -> dict[str, tuple[np.ndarray, int]]:
    return _recordings()


@pytest.mark.parametrize("config_name", list(CONFIGS))
@pytest.mark.parametrize("path", ["numpy", "tf"])
def test_both_paths_within_the_stated_bound_on_real_recordings(recordings, path, config_name):
    config = CONFIGS[config_name]
    paths = {"numpy": features.compute_features_numpy, "tf": features_tf.compute_features_tf}
    compute = paths[path]
    for name, (waveforms, rate) in recordings.items():
        got = compute(waveforms, sample_rate=rate, config=config)
        reference = reference_features(waveforms, sample_rate=rate, config=config)
        assert_within_stated_bound(got, reference, config=config, what=f"{path} {name}")


def test_the_bound_is_needed_float32_rounding_per_value_is_not_what_holds(recordings):
    """The old claim ("agree to float32 rounding, 1e-5") fails on the 64 kHz recording: the
    stated bound is not looser than it has to be for log_mel in quiet bands.

    Measured against the float64 reference, not between the two float32 paths: how far numpy's
    and TF's FFTs drift apart depends on the kernels each picks for this CPU, while a float32
    log-mel's error in bands 40-60 dB below the frame's peak (~5e-4 here) does not.
    """
    waveforms, rate = recordings["tug_64k"]
    config = CONFIGS["default"]
    reference = reference_features(waveforms, sample_rate=rate, config=config)["log_mel"]
    for compute in (features.compute_features_numpy, features_tf.compute_features_tf):
        got = compute(waveforms, sample_rate=rate, config=config)["log_mel"]
        assert np.abs(got.astype(np.float64) - reference).max() > 1e-5, compute.__name__
