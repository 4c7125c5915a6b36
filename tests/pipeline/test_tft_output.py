"""The output directory is a standard tensorflow-transform output: every `tft.TFTransformOutput`
method works on it (raw schema in ``metadata/``, transformed schema, transform graph, vocabulary)
and reproduces the stored records."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.record_helpers import SAMPLE_DIR, load_manifest, read_records, record

pytestmark = pytest.mark.slow
BATCH = 5


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("tft") / "out"
    record(str(SAMPLE_DIR / "*.wav"), out, "--win_len", "8000", "--features", "log_mel,mfcc")
    return out


def test_raw_and_transformed_specs(out):
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(str(out))
    elements = load_manifest(out)["elements"]
    raw = output.raw_feature_spec()
    assert set(raw) == {"class", "log_mel", "mfcc"}  # what the transform graph takes
    assert raw["log_mel"] == tf.io.FixedLenFeature(elements["log_mel"]["shape"], tf.float32)
    assert raw["class"] == tf.io.FixedLenFeature([], tf.string)
    assert set(output.raw_domains()) <= set(raw)
    assert (out / "schema.pbtxt").exists()  # the stored-record schema stays at the top

    transformed = output.transformed_feature_spec()
    for key in ("target", "num_classes", "log_mel_norm", "mfcc_norm", "log_mel", "class"):
        assert key in transformed, key
    assert transformed["target"] == tf.io.FixedLenFeature([], tf.int64)
    assert transformed["log_mel_norm"].shape == elements["log_mel_norm"]["shape"]
    assert "target" in output.transformed_domains()


def test_vocabulary_by_name_is_the_manifest_classes(out):
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(str(out))
    classes = load_manifest(out)["classes"]
    assert classes == ["bird", "engine", "rain"]
    with open(output.vocabulary_file_by_name("class"), encoding="utf-8") as fh:
        assert fh.read().splitlines() == classes
    assert output.vocabulary_by_name("class") == [c.encode() for c in classes]
    assert output.vocabulary_size_by_name("class") == len(classes)


def test_transform_raw_features_reproduces_the_stored_records(out):
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(str(out))
    m = load_manifest(out)
    shard = out / m["splits"]["all"]["shards"][0]["filename"]
    serialized = next(iter(tf.data.TFRecordDataset(str(shard)).batch(BATCH)))
    raw = tf.io.parse_example(serialized, output.raw_feature_spec())  # our shards, parsed raw
    transformed = output.transform_raw_features(raw)
    stored = read_records(out)[:BATCH]
    assert transformed["target"].numpy().tolist() == [int(r["target"]) for r in stored]
    assert transformed["num_classes"].numpy().tolist() == [3] * BATCH
    for key in ("log_mel_norm", "mfcc_norm"):
        np.testing.assert_array_equal(transformed[key].numpy(), np.stack([r[key] for r in stored]))
    # And parsed with the transformed spec, the stored records are what the transform gives.
    parsed = tf.io.parse_example(serialized, output.transformed_feature_spec())
    np.testing.assert_array_equal(parsed["target"].numpy(), transformed["target"].numpy())
