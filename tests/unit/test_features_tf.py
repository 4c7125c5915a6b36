"""transforms.audio.features_tf: the features as a tf.signal graph (what ``feature_fn/`` serves)
against the numpy path the pipeline stores, in both feature configurations: the two paths agree
within float32 rounding, and the saved serving module, re-loaded, computes what was stored
(train/serve skew). Blocking and shapes are checked on both paths in test_features.py, and both
paths on real recordings in test_features_real.py."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.feature_cases import CASES, assert_close, make_waveforms
from transforms.audio import features, features_tf
from transforms.audio.features import FeatureConfig


@pytest.fixture(scope="module", params=list(CASES))
def case(request) -> tuple[FeatureConfig, int, np.ndarray]:
    cfg, sample_rate, win_len = CASES[request.param]
    return cfg, sample_rate, make_waveforms(7, win_len, sample_rate)


def test_numpy_and_tf_paths_agree(case) -> None:
    cfg, sample_rate, waveforms = case
    numpy_out = features.compute_features_numpy(waveforms, sample_rate=sample_rate, config=cfg)
    tf_out = features_tf.compute_features_tf(waveforms, sample_rate=sample_rate, config=cfg)
    assert_close(numpy_out, tf_out, num_mel_bins=cfg.num_mel_bins, rtol=1e-5, log_atol=1e-5)


def test_saved_feature_module_matches_compute_features(case, tmp_path) -> None:
    """Train/serve skew: the exported graph, re-loaded, computes what the pipeline stored."""
    import tensorflow as tf

    cfg, sample_rate, waveforms = case
    win_len = waveforms.shape[1]
    module = features_tf.tf_feature_module(cfg, win_len=win_len, sample_rate=sample_rate)
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.__call__})
    loaded = tf.saved_model.load(str(tmp_path))
    want = features.compute_features(waveforms, sample_rate=sample_rate, config=cfg)

    got = {name: t.numpy() for name, t in loaded(tf.constant(waveforms)).items()}
    assert_close(
        {n: got[n] for n in cfg.names},
        want,
        num_mel_bins=cfg.num_mel_bins,
        rtol=1e-5,
        log_atol=1e-5,
    )
    served = loaded.signatures["serving_default"](waveforms=tf.constant(waveforms))
    assert sorted(served) == sorted(cfg.names)
    np.testing.assert_array_equal(served[cfg.names[0]].numpy(), got[cfg.names[0]])
    empty = loaded(tf.zeros([0, win_len]))
    shapes = features.feature_shapes(cfg, win_len=win_len, sample_rate=sample_rate)
    assert {n: tuple(t.shape) for n, t in empty.items()} == {n: (0, *s) for n, s in shapes.items()}
