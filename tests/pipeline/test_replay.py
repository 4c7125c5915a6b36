"""Tests of the `replay` reader against datasets written by tests/support/replay_fixtures.py."""

from __future__ import annotations

import dataclasses
import json
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
from tests.support.replay_fixtures import write_dataset, write_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def collect(ds: tf.data.Dataset) -> list[dict]:
    return list(ds.as_numpy_iterator())


def indices(elements: list[dict]) -> list[int]:
    return [int(e[fmt.INDEX_KEY]) for e in elements]


def all_indices(expected: dict, splits=None) -> list[int]:
    splits = splits or list(expected["elements"])
    return [int(e[fmt.INDEX_KEY]) for s in splits for e in expected["elements"][s]]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One split ("all"), shards of 5, 0 and 3 records: an empty shard is legal."""
    path = str(tmp_path_factory.mktemp("single"))
    return path, write_dataset(path, num_examples_per_shard=(5, 0, 3))


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    """Splits train (4 shards) and eval (2 shards)."""
    path = str(tmp_path_factory.mktemp("splits"))
    counts = {"train": (5, 7, 3, 6), "eval": (2, 4)}
    return path, write_dataset(path, num_examples_per_shard=counts, split_names=["train", "eval"])


# --- import ----------------------------------------------------------------------------------


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return set(out.stdout.split())


def test_import_replay_loads_no_beam_tft_or_tensorflow():
    loaded = _modules_after("import replay")
    assert not loaded & {"apache_beam", "tensorflow_transform", "tensorflow", "pipelines"}


def test_replay_dataset_import_loads_no_beam_or_tft():
    loaded = _modules_after("from replay import replay_dataset, load_info, verify_dataset")
    assert "tensorflow" in loaded
    assert not loaded & {"apache_beam", "tensorflow_transform", "pipelines"}


def test_public_api():
    assert callable(replay.replay_dataset) and callable(replay.default_reader_func)
    for name in replay.__all__:
        assert getattr(replay, name) is not None
    for cls in (
        replay.DatasetNotFoundError,
        replay.IncompleteDatasetError,
        replay.ManifestError,
        replay.MissingShardError,
        replay.ShardSizeError,
        replay.CorruptShardError,
        replay.UnknownSplitError,
        replay.UnknownFeatureError,
    ):
        assert issubclass(cls, replay.ReplayError)
    assert issubclass(replay.ManifestError, fmt.FormatError)


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
    assert len(info.files) == 27 and info.files[0]["path"] == manifest["files"][0]["path"]
    assert info.errors[0]["reason"] == "not a RIFF file"
    assert [s.path for s in info.shard_list("train")] == expected["shards"]["train"]
    assert [s.num_examples for s in info.shards["eval"]] == [2, 4]
    assert info.elements["signal"] == fmt.ElementSpec("int16", (64,), "raw")
    assert info.element_spec["signal"] == tf.TensorSpec([64], tf.int16)
    assert info.element_spec["log_mel"] == tf.TensorSpec([4, 8], tf.float32)
    assert info.element_spec["sample_rate"] == tf.TensorSpec([], tf.int32)
    schema = info.schema()
    assert [f.name for f in schema.feature] == list(info.elements)
    assert [d.size for d in schema.feature[-1].shape.dim] == [4, 8]
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


# --- elements --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compression", "signal_dtype"), [("GZIP", "int16"), ("ZLIB", "int32"), ("NONE", "float32")]
)
def test_elements_are_exact(tmp_path, compression, signal_dtype):
    expected = write_dataset(
        tmp_path, compression=compression, signal_dtype=signal_dtype, win_len=33, seed=3
    )
    info = load_info(tmp_path)  # os.PathLike works too
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
    manifest["elements"]["log_mel"]["shape"] = [5, 8]  # the records hold [4, 8]: undecodable
    write_manifest(tmp_path, manifest)
    got = collect(replay_dataset(str(tmp_path), features=["signal", "target"], batch_size=4))
    assert sum(len(b["target"]) for b in got) == 8  # log_mel never parsed: no error
    with pytest.raises(tf.errors.InvalidArgumentError):
        collect(replay_dataset(str(tmp_path), features=["log_mel"], batch_size=4))


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


# --- reader_func -----------------------------------------------------------------------------


def test_reader_func_gets_dataset_of_shard_datasets(splits):
    path, expected = splits
    calls = []

    def reader_func(datasets):
        calls.append(datasets)
        return datasets.flat_map(lambda shard: shard)  # shard after shard, file order

    ds = replay_dataset(path, split="train", reader_func=reader_func, seed=0)
    assert len(calls) == 1
    datasets = calls[0]
    assert isinstance(datasets, tf.data.Dataset)
    assert isinstance(datasets.element_spec, tf.data.DatasetSpec)
    assert datasets.element_spec.element_spec == load_info(path).element_spec
    assert int(datasets.cardinality()) == 4  # one per shard file
    assert indices(collect(ds)) == all_indices(expected, ["train"])  # manifest order


def test_shuffling_reader_func_changes_order_not_content(splits):
    path, expected = splits

    def reader_func(datasets):  # the snapshot docs' example: shuffle shards, then interleave
        datasets = datasets.shuffle(100, seed=5)
        return datasets.interleave(
            lambda shard: shard, cycle_length=2, num_parallel_calls=2, deterministic=True
        )

    got = indices(collect(replay_dataset(path, reader_func=reader_func, seed=1)))
    assert got != all_indices(expected)
    assert sorted(got) == sorted(all_indices(expected))


def test_reader_func_must_return_elements(single):
    path, _ = single
    with pytest.raises(TypeError, match="reader_func"):
        replay_dataset(path, reader_func=lambda datasets: datasets)


def _train_shards(expected: dict) -> list[list[int]]:
    shards, start = [], 0
    for count in (5, 7, 3, 6):
        shards.append(all_indices(expected, ["train"])[start : start + count])
        start += count
    return shards


def test_default_reader_interleaves_blocks_without_shuffling(splits):
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", cycle_length=4, block_length=2, deterministic=True)
    got = indices(collect(ds))
    assert got[:8] == [i for s in shards for i in s[:2]]  # 2 records of each shard in turn
    for shard in shards:  # each shard's own order is kept
        assert [i for i in got if i in shard] == shard
    # Default block_length: 64 records, more than a shard holds here: shard after shard.
    batches = collect(replay_dataset(path, split="train", batch_size=4, deterministic=True))
    assert [len(b["index"]) for b in batches] == [4] * 5 + [1]  # rebatched across shards
    assert np.concatenate([b["index"] for b in batches]).tolist() == [i for s in shards for i in s]


def test_with_a_shuffle_buffer_the_default_block_is_one_record(splits):
    """A shard holds its windows in file order: blocks would fill a small shuffle buffer with
    neighbouring windows of one file, so with a buffer the shards take turns record by record
    (a buffer of 1 keeps the order it is given)."""
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", cycle_length=4, shuffle_buffer=1, deterministic=True)
    got = indices(collect(ds))
    assert got[:4] == [s[0] for s in shards] and got[4:8] == [s[1] for s in shards]
    assert sorted(got) == sorted(i for s in shards for i in s)


def test_seed_order_is_whole_blocks_in_shuffled_shard_order(splits):
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", shuffle_shards=True, seed=3, batch_size=5)
    got = np.concatenate([b["index"] for b in collect(ds)]).tolist()
    assert got == indices(collect(replay_dataset(path, split="train", shuffle_shards=True, seed=3)))
    order = sorted(shards, key=lambda s: got.index(s[0]))
    assert got == [i for s in order for i in s]  # blocks of 64 > any shard: whole shards


# --- order and seeds -------------------------------------------------------------------------


def test_seed_makes_order_reproducible(splits):
    path, expected = splits

    def build(**kw):
        return replay_dataset(path, shuffle_shards=True, shuffle_buffer=8, seed=7, **kw)

    a, b = build(), build()
    a1, a2 = indices(collect(a)), indices(collect(a))
    assert a1 == indices(collect(b)) and a2 == indices(collect(b))
    assert a1 != a2  # reshuffled each iteration
    assert sorted(a1) == sorted(all_indices(expected))
    assert a.options().deterministic is True
    fixed = build(reshuffle_each_iteration=False)
    assert indices(collect(fixed)) == indices(collect(fixed))


def test_no_seed_means_nondeterministic_order(single):
    path, _ = single
    assert replay_dataset(path).options().deterministic is False
    assert replay_dataset(path, deterministic=True).options().deterministic is True


# --- input_context ---------------------------------------------------------------------------


@pytest.mark.parametrize("num_pipelines", [1, 2, 3, 7])
@pytest.mark.parametrize("shuffle_shards", [False, True])
def test_input_context_shares_are_disjoint_and_complete(splits, num_pipelines, shuffle_shards):
    path, expected = splits  # 4 train shards: 7 pipelines fall back to element sharding
    seen = []
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(
            num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id
        )
        ds = replay_dataset(
            path, split="train", input_context=context, shuffle_shards=shuffle_shards
        )
        share = indices(collect(ds))
        assert int(ds.cardinality()) == len(share)
        seen.extend(share)
    assert sorted(seen) == sorted(all_indices(expected, ["train"]))


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
    write_manifest(tmp_path, {**expected["manifest"], "format_version": fmt.FORMAT_VERSION + 1})
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
    expected = write_dataset(tmp_path, compression="NONE")
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
    expected = write_dataset(tmp_path, num_examples_per_shard=(5, 70, 3), compression="NONE")
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


def test_manifest_is_json_per_format(splits):
    path, expected = splits
    with open(os.path.join(path, fmt.MANIFEST_FILENAME)) as f:
        manifest = json.load(f)
    assert manifest["complete"] is True and manifest["format"] == fmt.FORMAT_NAME
    for split, entry in manifest["splits"].items():
        for index, shard in enumerate(entry["shards"]):
            parsed = fmt.parse_shard_filename(shard["filename"])
            assert parsed["split"] == split and parsed["index"] == index
