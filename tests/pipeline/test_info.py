"""`load_info` (`replay.info`): what a dataset holds, read from its manifest, on the hand-made
datasets `single` and `splits` (tests/pipeline/conftest.py); reading the records: test_reader.py.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import tensorflow as tf

from replay import format as fmt
from replay import load_info, replay_dataset
from tests.support.replay_elements import collect
from tests.support.replay_fixtures import write_dataset

# --- load_info -------------------------------------------------------------------------------


def test_load_info(splits):
    path, expected = splits
    info = load_info(path)
    manifest = expected["manifest"]
    assert info.splits == ("train", "eval")
    assert info.num_examples() == manifest["num_examples"] == 27
    assert info.num_examples("train") == 21 and info.num_examples(["eval"]) == 6
    assert info.classes == tuple(manifest["classes"]) and info.num_classes == 3
    assert info.compression == "GZIP" and info.compression_type == "GZIP"
    assert info.params["win_len"] == 64
    assert len(info.files) == 27 and info.files[0]["path"] == expected["files"][0]["path"]
    assert (info.num_files, info.num_errors) == (27, 1)
    assert info.errors[0]["reason"] == "not a RIFF file"
    assert [s.path for s in info.shard_list("train")] == expected["shards"]["train"]
    assert [s.num_examples for s in info.shards["eval"]] == [2, 4]
    assert info.elements["signal"] == fmt.ElementSpec("int16", (64,), "raw")
    assert info.element_spec["signal"] == tf.TensorSpec([64], tf.int16)
    assert info.element_spec["log_mel"] == tf.TensorSpec([4, 8], tf.float32)
    assert info.element_spec["sample_rate"] == tf.TensorSpec([], tf.int32)
    schema = info.schema()
    assert [f.name for f in schema.feature] == [k for k, s in info.elements.items() if s.stored]
    assert "log_mel_norm" not in [f.name for f in schema.feature]  # computed, not stored
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.compression = "NONE"
    with pytest.raises(TypeError):
        info.params["win_len"] = 1


def test_schema_is_optional(tmp_path):
    write_dataset(tmp_path)
    os.remove(tmp_path / fmt.SCHEMA_FILENAME)
    assert load_info(tmp_path).schema() is None


def test_load_info_through_gfile_url(splits):
    path, _ = splits
    info = load_info("file://" + path)  # a URL: every access goes through tf.io.gfile
    assert info.num_examples() == 27
    info.check_shards()
    assert len(collect(replay_dataset("file://" + path, split="eval"))) == 6
