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


def test_transform_raw_features_reproduces_the_replayed_records(out):
    """TFT's own transform of the raw features gives bit for bit the ``<feature>_norm`` that
    replay computes from the manifest's statistics (format version 2 stores the raw features
    only), and the ``target`` stored in the shards."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from replay import replay_dataset

    output = tft.TFTransformOutput(str(out))
    ds = replay_dataset(out, batch_size=BATCH, deterministic=True)
    element = next(iter(ds))
    raw = {key: element[key] for key in output.raw_feature_spec()}  # what the graph takes
    transformed = output.transform_raw_features(raw)
    stored = read_records(out)[:BATCH]
    assert transformed["target"].numpy().tolist() == [int(r["target"]) for r in stored]
    assert element["target"].numpy().tolist() == [int(r["target"]) for r in stored]
    assert transformed["num_classes"].numpy().tolist() == [3] * BATCH
    for key in ("log_mel_norm", "mfcc_norm"):
        want = transformed[key].numpy().view(np.uint32)  # bits: -0.0 is not 0.0 here
        np.testing.assert_array_equal(element[key].numpy().view(np.uint32), want, err_msg=key)
        np.testing.assert_array_equal(np.stack([r[key] for r in stored]).view(np.uint32), want)
    # And parsed with the transformed spec's stored int64 keys, the records hold the target.
    m = load_manifest(out)
    shard = out / m["splits"]["all"]["shards"][0]["filename"]
    serialized = next(iter(tf.data.TFRecordDataset(str(shard)).batch(BATCH)))
    spec = {k: output.transformed_feature_spec()[k] for k in ("target", "num_classes")}
    parsed = tf.io.parse_example(serialized, spec)
    np.testing.assert_array_equal(parsed["target"].numpy(), transformed["target"].numpy())
