"""The URL schemes a dataset may live under are those TensorFlow's file I/O has (it writes the
shards and replay reads them): checked against the installed TensorFlow, so that a TensorFlow
that gains or loses a file system changes `replay.storage.DATASET_SCHEMES` knowingly."""

from __future__ import annotations

import tensorflow as tf

from replay import storage


def test_dataset_schemes_are_tensorflows_file_systems_but_ram():
    assert set(storage.DATASET_SCHEMES) == set(tf.io.gfile.get_registered_schemes()) - {"ram"}


def test_scheme_of_paths_and_urls():
    got = [storage.scheme(p) for p in ("out/x", "/abs", "gs://b/x", "S3://b/x", "file:///tmp")]
    assert got == ["", "", "gs", "s3", "file"]
