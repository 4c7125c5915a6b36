"""The tf.signal path of `transforms.audio.features`: the serving graph and `compute_features_tf`.

`tf_feature_module` is what ``feature_fn/`` exports (raw windows -> features, the numpy path's
mel matrix embedded as a constant); `compute_features_tf` runs it on numpy windows, for tests
and `benchmarks/features_numpy_vs_tf.py`. Accuracy and the comparison with the numpy path are
in `transforms.audio.features`' docstring.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from transforms.audio.features import (
    LOG_MEL,
    MFCC,
    SPECTROGRAM,
    FeatureConfig,
    as_waveforms,
    feature_shapes,
    mel_matrix_for,
)

if TYPE_CHECKING:
    import tensorflow as tf

# Frames per graph call of `compute_features_tf` (~42 windows; 2048..8192 measured fastest).
_TF_BLOCK_FRAMES = 4096


def compute_features_tf(
    waveforms: np.ndarray, *, sample_rate: int, config: FeatureConfig
) -> dict[str, np.ndarray]:
    """`compute_features` with tf.signal, via the (cached) `tf_feature_module` graph.

    Same arguments and result; calls the graph on blocks of ~`_TF_BLOCK_FRAMES` frames.
    """
    x = as_waveforms(waveforms)
    n, win_len = x.shape
    shapes = feature_shapes(config, win_len=win_len, sample_rate=sample_rate)
    if n == 0 or not shapes:
        return {name: np.empty((n, *shape), dtype=np.float32) for name, shape in shapes.items()}
    module = _cached_tf_module(config, win_len, float(sample_rate))
    block = max(1, _TF_BLOCK_FRAMES // next(iter(shapes.values()))[0])
    parts = [module(x[start : start + block]) for start in range(0, n, block)]
    if len(parts) == 1:
        return {name: parts[0][name].numpy() for name in shapes}
    return {name: np.concatenate([p[name].numpy() for p in parts]) for name in shapes}


@functools.lru_cache(maxsize=16)
def _cached_tf_module(config: FeatureConfig, win_len: int, sample_rate: float) -> tf.Module:
    return tf_feature_module(config, win_len=win_len, sample_rate=sample_rate)


def tf_feature_module(config: FeatureConfig, *, win_len: int, sample_rate: int) -> tf.Module:
    """The serving graph: a tf.Module computing the features from raw windows.

    ``module(waveforms)`` with float32 [None, win_len] windows scaled to [-1, 1) returns
    {name: float32 [None, num_frames, bins]} in `config.names` order. `__call__` is a
    tf.function with an input signature, so ``tf.saved_model.save(module, path)`` exports it
    (pass ``signatures={"serving_default": module.__call__}`` for a serving signature) and
    ``tf.saved_model.load(path)(waveforms)`` computes the same features.

    Args:
      config: the features (validated; ValueError, also when `config.names` is empty).
      win_len: samples per window (fixed in the signature).
      sample_rate: samples per second (fixed in the graph).
    """
    import tensorflow as tf

    shapes = feature_shapes(config, win_len=win_len, sample_rate=sample_rate)
    if not shapes:
        raise ValueError("FeatureConfig.names is empty: a feature module needs a feature")
    need_mel = LOG_MEL in shapes or MFCC in shapes
    mel_matrix = mel_matrix_for(config, sample_rate) if need_mel else None
    signature = [tf.TensorSpec([None, win_len], tf.float32, name="waveforms")]

    class FeatureModule(tf.Module):
        # autograph=False: the body has no tensor-dependent Python control flow, so AutoGraph's
        # source-to-source conversion would give the same graph and costs CPU on every run
        @tf.function(input_signature=signature, autograph=False)
        def __call__(self, waveforms: tf.Tensor) -> dict[str, tf.Tensor]:
            return _tf_features(waveforms, config=config, mel_matrix=mel_matrix)

    return FeatureModule(name="audiorecords_features")


def _tf_features(
    waveforms: tf.Tensor, *, config: FeatureConfig, mel_matrix: np.ndarray | None
) -> dict[str, tf.Tensor]:
    """Graph body of `tf_feature_module`: float32 [n, win_len] -> {name: [n, frames, bins]}."""
    import tensorflow as tf

    stft = tf.signal.stft(
        waveforms,
        frame_length=config.frame_length,
        frame_step=config.frame_step,
        fft_length=config.fft_length,
        window_fn=tf.signal.hann_window,  # periodic
        pad_end=False,
    )
    features = {SPECTROGRAM: tf.abs(stft)}
    if mel_matrix is not None:
        _, num_frames, num_bins = features[SPECTROGRAM].shape  # frames static: win_len is
        mel = tf.matmul(  # 2-D matmul: measured faster than a broadcast 3-D one
            tf.reshape(features[SPECTROGRAM], [-1, num_bins]),
            tf.constant(mel_matrix, name="mel_weight_matrix"),
        )
        mel = tf.reshape(mel, [-1, num_frames, config.num_mel_bins])
        features[LOG_MEL] = tf.math.log(mel + config.log_offset)
        if MFCC in config.names:
            mfccs = tf.signal.mfccs_from_log_mel_spectrograms(features[LOG_MEL])
            features[MFCC] = mfccs[..., : config.num_mfccs]
    return {name: tf.identity(features[name], name=name) for name in config.names}
