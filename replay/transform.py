"""Serving: apply the recorded feature transform to raw windows, with plain `tf.saved_model.load`.

A dataset directory holds two SavedModels that together reproduce what the record job stored:

- ``feature_fn/``: raw waveform in [-1, 1) ``float32 [batch, win_len]`` -> raw features
  (``log_mel`` ...), the same tf.signal graph the record job's features match;
- ``transform_fn/``: tensorflow-transform's graph: ``class`` -> ``target`` / ``num_classes``
  and raw features -> ``<feature>_norm`` with the dataset's statistics.

`load_transform` loads both (tensorflow-transform itself is not imported) and returns a callable
that takes what a server has — raw ``signal`` samples — and returns the recorded keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from replay import format as fmt
from replay import storage
from replay.errors import ReplayError
from replay.info import load_info


class ServingTransform:
    """Raw windows -> the recorded features (and ``target`` when ``class`` is given).

    Call it with ``{"signal": [batch, win_len] samples in the dataset's signal dtype}`` (and
    optionally ``"class"``: string [batch]). Returns a dict with the raw features, their
    ``_norm`` versions, and ``target`` / ``num_classes`` (target -1 for unknown or absent class).
    """

    def __init__(
        self,
        *,
        feature_fn: Any,
        transform_fn: Any,
        feature_names: tuple[str, ...],
        full_scale: float,
    ):
        self._feature_fn = feature_fn
        self._transform_fn = transform_fn  # the loaded TFT SavedModel (owns its lookup tables)
        self.feature_names = feature_names
        self.full_scale = full_scale

    def __call__(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        import tensorflow as tf

        signal = tf.convert_to_tensor(raw[fmt.SIGNAL_KEY])
        waveform = tf.cast(signal, tf.float32) / tf.constant(self.full_scale, tf.float32)
        features = self._feature_fn(waveform)
        batch = tf.shape(signal)[0]
        classes = raw.get(fmt.CLASS_KEY)
        inputs = {
            fmt.CLASS_KEY: (
                tf.fill([batch], "")
                if classes is None
                else tf.convert_to_tensor(classes, tf.string)
            )
        }
        inputs.update({name: features[name] for name in self.feature_names})
        return dict(self._transform_fn.transform_fn(inputs))


def transform_dir(info: Any) -> str:
    """The ``transform_fn/`` of the dataset version `info` describes: that of its newest
    append with ``transform: "refresh"`` (``appends/<token>/transform_fn``), else the root's.
    `tft.TFTransformOutput` takes its parent directory."""
    directory = ""
    for commit in info.commits:
        if commit.get("transform") == fmt.REFRESH_TRANSFORM:
            directory = commit["dir"]
    return storage.join(info.path, fmt.commit_file(directory, fmt.TRANSFORM_FN_DIR))


def load_transform(path: str | os.PathLike, *, version: int | None = None) -> ServingTransform:
    """Loads ``feature_fn/`` and ``transform_fn/`` of a dataset as a `ServingTransform`.

    `version`: the dataset version whose transform to load (default the newest; see
    `load_info`): an append that refreshed the statistics brings its own ``transform_fn/``.

    Raises:
      ReplayError: the dataset has no features, or its files do not share one sample rate and
        one sample format (then no single serving graph reproduces every file's features).
    """
    import tensorflow as tf

    info = load_info(path, version=version)
    root = os.fspath(path).rstrip("/")
    names = tuple(info.params.get("features", ()))
    if not names:
        raise ReplayError(f"{root}: the dataset was recorded without features; nothing to serve")
    scales = {f.get("full_scale") for f in info.files}
    feature_dir = storage.join(root, fmt.FEATURE_FN_DIR)
    transform = transform_dir(info)
    if len(scales) != 1 or None in scales or not tf.io.gfile.exists(feature_dir):
        raise ReplayError(
            f"{root}: no single serving transform: files differ in sample rate or format "
            "(record with --sample_rate to resample them to one rate)"
        )
    for directory in (feature_dir, transform):  # the SavedModels must be the dataset's own
        target = storage.outside(root, directory)
        if target is not None:
            raise ReplayError(f"{directory}: leads outside the dataset directory (to {target})")
    return ServingTransform(
        feature_fn=tf.saved_model.load(feature_dir),
        transform_fn=tf.saved_model.load(transform),
        feature_names=names,
        full_scale=float(scales.pop()),
    )
