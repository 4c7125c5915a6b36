"""The tensorflow-transform side's schema of the stored records
(`transforms.stages.preprocessing.element_schema`): one feature per stored key, its type and
stored shape, the decoded dtype and shape in annotation tags, a computed z-score key left out;
and each feature's z-score scope name. `preprocessing_fn` itself runs inside a real TFT analysis
in test_exact_z_score.py (class ids, vocabulary, z-scores bit for bit)."""

from __future__ import annotations

from replay import format as fmt
from transforms.stages.preprocessing import element_schema, z_score_scope

SPECS = {
    "class": fmt.ElementSpec("string", (), fmt.ENCODING_BYTES_LIST),
    "target": fmt.ElementSpec("int64", (), fmt.ENCODING_INT64_LIST),
    "signal": fmt.ElementSpec("int16", (64,), fmt.ENCODING_RAW),
    "log_mel": fmt.ElementSpec("float32", (2, 3), fmt.ENCODING_RAW, "float16"),
    "mfcc": fmt.ElementSpec("float32", (2, 4), fmt.ENCODING_FLOAT_LIST),
    "log_mel_norm": fmt.ElementSpec(
        "float32", (2, 3), fmt.ENCODING_Z_SCORE, z_score=fmt.ZScore("log_mel", -1.5, 0.25)
    ),
}


def test_the_schema_has_every_stored_key_with_its_type_shape_and_tags():
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = element_schema(SPECS)
    features = {f.name: f for f in schema.feature}
    assert list(features) == ["class", "target", "signal", "log_mel", "mfcc"]  # no z-score key
    types = {name: schema_pb2.FeatureType.Name(f.type) for name, f in features.items()}
    assert types == {
        "class": "BYTES",
        "target": "INT",
        "signal": "BYTES",
        "log_mel": "BYTES",
        "mfcc": "FLOAT",
    }
    shapes = {name: [d.size for d in f.shape.dim] for name, f in features.items()}
    assert shapes == {"class": [], "target": [], "signal": [1], "log_mel": [1], "mfcc": [2, 4]}
    assert all(f.HasField("shape") for f in features.values())  # [] is a scalar, not unknown
    tags = {name: list(f.annotation.tag) for name, f in features.items()}
    assert tags["signal"] == ["dtype:int16", "shape:64", "encoding:raw"]
    assert tags["log_mel"] == [
        "dtype:float32",
        "shape:2,3",
        "encoding:raw",
        "stored_dtype:float16",
    ]
    assert tags["class"] == ["dtype:string", "shape:", "encoding:bytes_list"]
    for f in features.values():
        assert (f.presence.min_fraction, f.presence.min_count) == (1.0, 1)


def test_z_score_scope_names_the_features_scope():
    assert z_score_scope("log_mel") == "z_score_log_mel"
