"""Tests of the `replay` reader against datasets written by tests/support/replay_fixtures.py:
imports, the decoded elements, cardinality and errors.

Most tests read hand-made datasets in the layout the record job writes (format version 3: float
features as raw bytes, ``log_mel_norm`` computed by the reader from the manifest's statistics;
`test_elements_are_exact` also reads float16 / bfloat16 features and the version-1 layout); the
datasets `single` and `splits` are tests/pipeline/conftest.py's. Order, `reader_func`, seeds,
`input_context`: test_reader_order.py; `ReadConfig`: test_read_config.py; `load_info`:
test_info.py; what the record job itself wrote: test_reader_recorded.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import replay
from replay import format as fmt
from replay import load_info, replay_dataset
from tests.support.replay_elements import all_indices, collect, indices
from tests.support.replay_fixtures import write_dataset, write_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- import ----------------------------------------------------------------------------------


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return set(out.stdout.split())


def test_import_replay_loads_no_beam_tft_or_tensorflow():
    loaded = _modules_after("import replay; replay.ReadConfig(seed=0, cycle_length=4)")
    assert not loaded & {"apache_beam", "tensorflow_transform", "tensorflow", "pipelines"}


def test_replay_dataset_import_loads_no_beam_or_tft():
    loaded = _modules_after("from replay import replay_dataset, load_info, verify_dataset")
    assert "tensorflow" in loaded
    assert not loaded & {"apache_beam", "tensorflow_transform", "pipelines"}


# --- elements --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compression", "signal_dtype", "feature_dtype", "version"),
    [
        ("GZIP", "int16", "float32", 2),
        ("ZLIB", "int32", "float16", 2),
        ("NONE", "float32", "bfloat16", 2),
        ("GZIP", "int16", "float32", 1),
    ],
)
def test_elements_are_exact(tmp_path, compression, signal_dtype, feature_dtype, version):
    """Every key of every element reads back bit for bit as numpy computed it: samples as
    written; ``log_mel`` the float32 values the writer was given, rounded to nearest even when
    stored as float16 / bfloat16 (`stored_values`, ties included); ``log_mel_norm`` their
    numpy z-score with the manifest's statistics (version 2 computes it in the reader: IEEE
    float32 subtraction, square root and division, so numpy's bits in this run on this machine;
    version 1 stores it)."""
    expected = write_dataset(
        tmp_path,
        compression=compression,
        signal_dtype=signal_dtype,
        win_len=33,
        format_version=version,
        feature_dtype=feature_dtype,
        seed=3,
    )
    info = load_info(tmp_path)  # os.PathLike works too
    assert info.format_version == version
    narrow = feature_dtype if feature_dtype != "float32" else None
    assert info.elements["log_mel"].stored_dtype == narrow
    ds = replay_dataset(tmp_path)
    assert ds.element_spec == info.element_spec
    got = {int(e["index"]): e for e in collect(ds)}
    want = expected["elements"][fmt.ALL_SPLIT]
    assert len(got) == len(want) == 15
    for element in want:
        actual = got[int(element["index"])]
        assert set(actual) == set(expected["manifest"]["elements"])
        for key, value in element.items():
            value = np.asarray(value)
            spec = info.elements[key]
            if spec.dtype == "string":
                assert actual[key] == value.item()
                continue
            assert actual[key].dtype == np.dtype(spec.dtype), key
            assert actual[key].shape == spec.shape, key
            assert actual[key].tobytes() == value.astype(spec.dtype).tobytes(), key  # bit-exact


def test_features_subset(splits):
    path, expected = splits
    ds = replay_dataset(path, split="eval", features=["signal", "target"])
    assert set(ds.element_spec) == {"signal", "target"}
    elements = collect(ds)
    want = {int(e["target"]): e for e in expected["elements"]["eval"]}
    assert len(elements) == 6
    assert all(set(e) == {"signal", "target"} for e in elements)
    signals = sorted(e["signal"].tobytes() for e in elements)
    assert signals == sorted(e["signal"].tobytes() for e in expected["elements"]["eval"])
    assert set(int(e["target"]) for e in elements) == set(want)
    assert set(replay_dataset(path, features="class").element_spec) == {"class"}


def test_keys_not_requested_are_not_parsed(tmp_path):
    expected = write_dataset(tmp_path, num_examples_per_shard=(5, 3), compression="NONE")
    manifest = expected["manifest"]
    for key in ("log_mel", "log_mel_norm"):  # the records hold [4, 8]: undecodable
        manifest["elements"][key]["shape"] = [5, 8]
    write_manifest(tmp_path, manifest)
    got = collect(replay_dataset(str(tmp_path), features=["signal", "target"], batch_size=4))
    assert sum(len(b["target"]) for b in got) == 8  # log_mel never parsed: no error
    for key in ("log_mel", "log_mel_norm"):
        with pytest.raises(tf.errors.InvalidArgumentError):
            collect(replay_dataset(str(tmp_path), features=[key], batch_size=4))


# --- cardinality -----------------------------------------------------------------------------


@pytest.mark.parametrize("split", [None, "train", "eval", ["eval", "train"]])
def test_cardinality_matches_manifest(splits, split):
    path, expected = splits
    names = [split] if isinstance(split, str) else split
    n = len(all_indices(expected, names))
    ds = replay_dataset(path, split=split)
    assert int(ds.cardinality()) == n
    assert sorted(indices(collect(ds))) == sorted(all_indices(expected, names))
    assert int(replay_dataset(path, split=split, batch_size=4).cardinality()) == math.ceil(n / 4)
    batched = replay_dataset(path, split=split, batch_size=4, drop_remainder=True)
    assert int(batched.cardinality()) == n // 4
    assert len(collect(batched)) == n // 4
    repeated = replay_dataset(path, split=split, repeat=True)
    assert repeated.cardinality() == tf.data.INFINITE_CARDINALITY


def test_empty_shard_and_batches(single):
    path, expected = single
    ds = replay_dataset(path, batch_size=3, shuffle_buffer=4)
    batches = collect(ds)
    assert int(ds.cardinality()) == len(batches) == 3
    assert batches[0]["signal"].shape == (3, 64) and batches[0]["log_mel"].shape == (3, 4, 8)
    assert sorted(np.concatenate([b["index"] for b in batches])) == all_indices(expected)


def test_repeat_is_infinite(single):
    path, expected = single
    got = indices(collect(replay_dataset(path, repeat=True).take(3 * 8)))
    assert sorted(got) == sorted(all_indices(expected) * 3)


# --- errors ----------------------------------------------------------------------------------


def test_missing_path(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(replay.DatasetNotFoundError, match="nope"):
        load_info(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(replay.DatasetNotFoundError, match="not a directory"):
        replay_dataset(str(tmp_path / "file"))


def test_no_manifest_is_incomplete(tmp_path):
    write_dataset(tmp_path)
    os.remove(tmp_path / fmt.MANIFEST_FILENAME)
    with pytest.raises(replay.IncompleteDatasetError, match="incomplete") as e:
        replay_dataset(str(tmp_path))
    assert str(tmp_path) in str(e.value)


@pytest.mark.parametrize("damage", ["not_complete", "truncated_json"])
def test_unfinished_manifest_is_incomplete(tmp_path, damage):
    expected = write_dataset(tmp_path)
    manifest_path = tmp_path / fmt.MANIFEST_FILENAME
    if damage == "not_complete":
        write_manifest(tmp_path, {**expected["manifest"], "complete": False})
    else:
        manifest_path.write_text(manifest_path.read_text()[:100])
    with pytest.raises(replay.IncompleteDatasetError, match="incomplete") as e:
        load_info(str(tmp_path))
    assert str(tmp_path) in str(e.value)


def test_newer_format_version(tmp_path):
    expected = write_dataset(tmp_path)
    write_manifest(
        tmp_path, {**expected["manifest"], "format_version": max(fmt.READABLE_VERSIONS) + 1}
    )
    with pytest.raises(replay.ManifestError, match="newer"):
        replay_dataset(str(tmp_path))


def test_missing_shard(tmp_path):
    expected = write_dataset(tmp_path)
    shard = expected["shards"]["all"][1]
    os.remove(shard)
    with pytest.raises(replay.MissingShardError, match=os.path.basename(shard)):
        replay_dataset(str(tmp_path))


def test_shard_size_mismatch(tmp_path):
    expected = write_dataset(tmp_path, compression="NONE")
    shard = expected["shards"]["all"][2]
    with open(shard, "ab") as f:
        f.write(b"\0")
    with pytest.raises(replay.ShardSizeError, match=os.path.basename(shard)):
        replay_dataset(str(tmp_path))


def _flip_middle_byte(path: str) -> None:
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        f.seek(0)
        f.write(bytes(data))


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "ZLIB"])
def test_corrupt_shard_names_the_file(tmp_path, compression):
    expected = write_dataset(tmp_path, num_examples_per_shard=(5, 7, 3), compression=compression)
    shard = expected["shards"]["all"][1]
    _flip_middle_byte(shard)  # same size: only reading finds it
    ds = replay_dataset(str(tmp_path), batch_size=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="corrupt") as e:
        collect(ds)
    assert shard in e.value.message
    with pytest.raises(replay.CorruptShardError, match=os.path.basename(shard)):
        replay.verify_dataset(str(tmp_path))


def test_record_count_differs_from_manifest(tmp_path):
    # format version 3: from version 4 the record offsets' size gives the count away first
    expected = write_dataset(tmp_path, compression="NONE", format_version=3)
    manifest = expected["manifest"]
    manifest["splits"]["all"]["shards"][0]["num_examples"] = 6  # the file holds 5
    manifest["splits"]["all"]["num_examples"] += 1  # the manifest's own sums still agree
    manifest["num_examples"] += 1
    write_manifest(tmp_path, manifest)
    with pytest.raises(tf.errors.InvalidArgumentError, match="read 5 of 6") as e:
        collect(replay_dataset(str(tmp_path)))
    assert expected["shards"]["all"][0] in e.value.message
    with pytest.raises(replay.CorruptShardError, match="manifest says 6"):
        replay.verify_dataset(str(tmp_path))


@pytest.mark.parametrize("delta", [1, -1])  # the manifest lists one more / one fewer record
@pytest.mark.parametrize("shuffle_buffer,batch_size", [(0, None), (0, 4), (8, None), (8, 3)])
def test_record_count_check_names_the_shard(tmp_path, delta, shuffle_buffer, batch_size):
    expected = write_dataset(  # version 3: no record offsets to give the count away first
        tmp_path, num_examples_per_shard=(5, 70, 3), compression="NONE", format_version=3
    )
    manifest = expected["manifest"]
    manifest["splits"]["all"]["shards"][1]["num_examples"] += delta  # the file holds 70
    manifest["splits"]["all"]["num_examples"] += delta
    manifest["num_examples"] += delta
    write_manifest(tmp_path, manifest)
    ds = replay_dataset(str(tmp_path), shuffle_buffer=shuffle_buffer, batch_size=batch_size)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"read 70 of {70 + delta}") as e:
        collect(ds)
    assert expected["shards"]["all"][1] in e.value.message


def test_verify_dataset_passes_on_good_data(splits):
    path, _ = splits
    assert replay.verify_dataset(path, split="eval").num_examples("eval") == 6


def test_unknown_split_lists_available(splits):
    path, _ = splits
    available = r"available splits: \['train', 'eval'\]"
    with pytest.raises(replay.UnknownSplitError, match="'test'.*" + available):
        replay_dataset(path, split="test")


def test_unknown_feature_lists_available(splits):
    path, _ = splits
    with pytest.raises(replay.UnknownFeatureError, match="mfcc.*available features:.*log_mel"):
        replay_dataset(path, features=["signal", "mfcc"])


def test_malformed_element_spec(tmp_path):
    expected = write_dataset(tmp_path)
    manifest = expected["manifest"]
    manifest["elements"]["signal"]["dtype"] = "string"  # raw bytes cannot decode to strings
    write_manifest(tmp_path, manifest)
    with pytest.raises(replay.ManifestError, match="signal"):
        load_info(tmp_path)
