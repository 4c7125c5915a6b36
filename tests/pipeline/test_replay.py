"""Tests of the `replay` reader against datasets written by tests/support/replay_fixtures.py.

Most tests read hand-made datasets in the layout the record job writes (format version 2: float
features as raw bytes, ``log_mel_norm`` computed by the reader from the manifest's statistics;
`test_elements_are_exact` also reads float16 / bfloat16 features and the version-1 layout). The
tests of section "real record runs" read what the record job itself wrote (`recorded`: tiny WAV
files recorded once per session with each ``--feature_dtype``) and check the decoded values
against numpy: the stored bytes, the z-score and the rounding are recomputed independently.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import replay
from replay import format as fmt
from replay import load_info, replay_dataset
from tests.support import replay_fixtures
from tests.support.floats import bits
from tests.support.replay_fixtures import (
    decode_raw,
    stored_records,
    stored_values,
    write_dataset,
    write_manifest,
)

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


def test_with_a_small_shuffle_buffer_the_default_block_is_one_record(splits):
    """A shard holds its windows in file order: blocks would fill a small shuffle buffer with
    neighbouring windows of one file, so with a buffer under 128 the shards take turns record
    by record (a buffer of 1 keeps the order it is given)."""
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", cycle_length=4, shuffle_buffer=1, deterministic=True)
    got = indices(collect(ds))
    assert got[:4] == [s[0] for s in shards] and got[4:8] == [s[1] for s in shards]
    assert sorted(got) == sorted(i for s in shards for i in s)


def test_shuffle_block_length_keeps_64_blocks_in_the_buffer():
    from replay.reader import shuffle_block_length

    buffers = (1, 64, 127, 128, 1000, 4095, 4096, 10_000, 10**6)
    assert [shuffle_block_length(b) for b in buffers] == [1, 1, 1, 2, 15, 63, 64, 64, 64]


def test_with_a_shuffle_buffer_the_default_block_follows_the_buffer(splits):
    """A buffer of 256 reads blocks of 4 records (shuffle_block_length): the seeded order is
    that of block_length=4, not that of one record at a time (the default before issue 28)."""
    path, expected = splits

    def order(**kw):
        ds = replay_dataset(path, split="train", shuffle_buffer=256, seed=5, cycle_length=4, **kw)
        return indices(collect(ds))

    assert order() == order(block_length=4)
    assert order() != order(block_length=1)
    assert sorted(order()) == sorted(all_indices(expected, ["train"]))


@pytest.mark.parametrize("kw", [{}, {"block_length": 2}, {"shuffle_buffer": 8, "seed": 1}])
def test_default_reading_keeps_the_deterministic_parallel_interleaves_order(splits, kw):
    """Default num_parallel_reads: each shard reads ahead in a thread of its own and a plain
    interleave takes its blocks in turn: the order of tf.data's parallel interleave with
    deterministic=True (an explicit num_parallel_reads)."""
    path, _ = splits
    ahead = replay_dataset(path, cycle_length=3, deterministic=True, **kw)
    parallel = replay_dataset(path, cycle_length=3, deterministic=True, num_parallel_reads=2, **kw)
    assert indices(collect(ahead)) == indices(collect(parallel))


def test_returned_datasets_leave_autotune_off_and_it_can_be_turned_on(splits):
    """Autotune's optimisation thread made deleting an iterator take 0.25-0.3 s in half the
    epochs (replay.reader, "Autotune"): every dataset replay returns has it off, as an option
    of that dataset, which the caller can turn back on."""
    path, _ = splits
    made = [
        replay_dataset(path),
        replay_dataset(path, shuffle_buffer=8, batch_size=2),
        replay_dataset(path, reader_func=replay.default_reader_func),
        replay_dataset(path, split="train", balance="class", seed=0),
    ]
    assert [ds.options().autotune.enabled for ds in made] == [False] * 4
    on = tf.data.Options()
    on.autotune.enabled = True
    assert made[0].with_options(on).options().autotune.enabled is True
    assert tf.data.Dataset.range(3).options().autotune.enabled is not False  # not process-wide


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


# --- real record runs ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> dict:
    """4 tiny WAV files recorded by the record job (DirectRunner, in process) once per
    ``--feature_dtype`` (float32, float16, bfloat16), once per session:
    ``{"samples": {path: int16 samples}, "runs": {feature_dtype: dataset directory}}``."""
    return replay_fixtures.record_runs(tmp_path_factory.mktemp("recorded"))


def _replayed(path) -> dict[tuple[int, int], dict]:
    """Every element `replay_dataset` decodes, by (index, win_start_idx)."""
    out = {}
    for batch in collect(replay_dataset(path, batch_size=3, deterministic=True)):
        for i in range(len(batch[fmt.INDEX_KEY])):
            element = {key: value[i] for key, value in batch.items()}
            out[int(element[fmt.INDEX_KEY]), int(element[fmt.WIN_START_KEY])] = element
    return out


def _stored(path) -> dict[tuple[int, int], dict]:
    """Every record as stored (protobuf, not `replay`), by (index, win_start_idx)."""
    return {(r[fmt.INDEX_KEY][0], r[fmt.WIN_START_KEY][0]): r for r in stored_records(path)}


def test_numpy_rounding_of_the_expected_values_is_to_nearest_even():
    """`stored_values`, which the expected float16 / bfloat16 features come from, pinned by
    hand: an exact tie goes to the even neighbour, anything past it to the nearest."""
    x = np.array([*replay_fixtures.BFLOAT16_TIES, -1 - 2.0**-8, 1 + 2.0**-8 + 2.0**-20], np.float32)
    assert stored_values(x, "bfloat16").tolist() == [1, 1 + 2.0**-6, -1, 1 + 2.0**-7]
    x = np.array([*replay_fixtures.FLOAT16_TIES, 1 + 2.0**-11 + 2.0**-20], np.float32)
    assert stored_values(x, "float16").tolist() == [1, 1 + 2.0**-9, 1 + 2.0**-10]


def _manifest(path) -> dict:
    with open(os.path.join(path, fmt.MANIFEST_FILENAME)) as f:
        return json.load(f)


def _table(path, filename: str) -> list[dict]:
    """A source table (format version 3) read with json alone."""
    with open(os.path.join(path, filename)) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("dtype", fmt.FEATURE_DTYPES)
def test_recorded_layout_is_version_3_and_the_hand_made_one_matches_it(recorded, tmp_path, dtype):
    """What the record job writes now: format version 3 (the source files in files.jsonl,
    none in the manifest), ``log_mel`` as raw bytes of `dtype` (2 or 4 bytes a value),
    ``log_mel_norm`` in no record but a z_score key of ``log_mel`` whose float32 statistics are
    in the manifest (as version 2); and `write_dataset` (the other tests' datasets) describes
    its keys and tables the same way."""
    path = recorded["runs"][dtype]
    manifest = _manifest(path)
    assert manifest["format_version"] == 3 and not {"files", "errors"} & set(manifest)
    assert manifest["num_files"] == len(_table(path, fmt.FILES_TABLE)) == 4
    feature, norm = manifest["elements"]["log_mel"], manifest["elements"]["log_mel_norm"]
    assert feature["encoding"] == "raw" and feature.get("stored_dtype", "float32") == dtype
    assert norm["encoding"] == "z_score" and norm["source"] == "log_mel"
    assert norm["shape"] == feature["shape"] == [4, 8]
    for stat in ("mean", "var"):
        assert float(np.float32(norm[stat])) == norm[stat]  # a float32 value, exact in JSON
    records = stored_records(path)
    assert len(records) == manifest["num_examples"] == 8
    width = 4 if dtype == "float32" else 2
    for record in records:
        assert "log_mel_norm" not in record and len(record["log_mel"]) == 32 * width
    hand_made_manifest = write_dataset(tmp_path, feature_dtype=dtype)["manifest"]
    assert list(hand_made_manifest) == [k for k in manifest if k != "analyzed_splits"]
    hand_made = hand_made_manifest["elements"]
    own = {"signal": ("shape",), "log_mel": (), "log_mel_norm": ("mean", "var")}  # its data's
    for key, differ in own.items():
        written = {k: v for k, v in manifest["elements"][key].items() if k not in differ}
        assert {k: v for k, v in hand_made[key].items() if k not in differ} == written, key


@pytest.mark.parametrize("dtype", fmt.FEATURE_DTYPES)
def test_recorded_norm_is_the_numpy_z_score_of_the_stored_feature(recorded, dtype):
    """`replay_dataset` on the record job's output: ``signal`` is the WAV file's samples bit
    for bit; ``log_mel`` is the stored bytes decoded in numpy (float16 with numpy's float16,
    bfloat16 by shifting its 16 bits into a float32); ``log_mel_norm`` is
    ``(log_mel - mean) / sqrt(var)`` computed in numpy float32 from those values and the
    manifest's statistics. Bit-equal: both sides compute it in this run on this machine, from
    the same float32 inputs, with correctly rounded IEEE float32 operations."""
    path = recorded["runs"][dtype]
    manifest = _manifest(path)
    spec = manifest["elements"]["log_mel_norm"]
    mean, var = np.float32(spec["mean"]), np.float32(spec["var"])
    assert abs(np.sqrt(var) - 1) > 0.1  # a z-score without its division cannot pass
    files = {f["index"]: f["path"] for f in _table(path, fmt.FILES_TABLE)}
    stored, replayed = _stored(path), _replayed(path)
    assert sorted(replayed) == sorted(stored) and len(stored) == 8
    for window, element in replayed.items():
        index, start = window
        samples = recorded["samples"][files[index]][start : start + 1024]
        np.testing.assert_array_equal(element["signal"], samples)
        assert element["signal"].dtype == np.int16
        feature = decode_raw(stored[window]["log_mel"], manifest["elements"]["log_mel"])
        assert element["log_mel"].dtype == element["log_mel_norm"].dtype == np.float32
        np.testing.assert_array_equal(bits(element["log_mel"]), bits(feature))
        want = (feature - mean) / np.sqrt(var)
        assert want.dtype == np.float32
        np.testing.assert_array_equal(bits(element["log_mel_norm"]), bits(want))


@pytest.mark.parametrize("dtype", fmt.STORED_DTYPES)
def test_recorded_narrow_features_are_the_writers_values_rounded(recorded, dtype):
    """``--feature_dtype float16 / bfloat16`` features read back as the float32 features of
    the float32 run (the values the writer was given: same input, computed in this session on
    this machine) rounded to nearest even by numpy (`stored_values`: numpy's float16, or the
    bfloat16 bit rounding the writer's ml_dtypes does); the z-score statistics are those of
    the float32 features in both runs."""
    exact, narrow = recorded["runs"]["float32"], recorded["runs"][dtype]
    assert (
        _manifest(narrow)["elements"]["log_mel_norm"]
        == _manifest(exact)["elements"]["log_mel_norm"]
    )
    given, got = _replayed(exact), _replayed(narrow)
    assert sorted(got) == sorted(given) and len(got) == 8
    rounded = 0
    for window, element in given.items():
        want = stored_values(element["log_mel"], dtype)
        np.testing.assert_array_equal(bits(got[window]["log_mel"]), bits(want), err_msg=window)
        rounded += int(np.sum(want != element["log_mel"]))
    assert rounded > 8 * 32 // 2  # most values are not representable: the rounding is tested


@pytest.mark.parametrize(("key", "shape"), [("log_mel_norm", [3, 5]), ("log_mel", [2, 16])])
def test_recorded_manifest_with_norm_shape_unlike_its_feature_is_refused(
    recorded, tmp_path, key, shape
):
    """A z_score key must have its source's shape: a manifest claiming ``log_mel_norm`` [3, 5]
    (or ``log_mel`` [2, 16], the same 32 values) next to a [4, 8] feature is refused before
    anything is read, naming the manifest, the key, its source and both shapes."""
    path = tmp_path / "dataset"
    shutil.copytree(recorded["runs"]["float32"], path)
    manifest = _manifest(path)
    manifest["elements"][key]["shape"] = shape
    write_manifest(path, manifest)
    norm_shape = manifest["elements"]["log_mel_norm"]["shape"]
    feature_shape = manifest["elements"]["log_mel"]["shape"]
    with pytest.raises(replay.ManifestError) as e:
        load_info(path)
    message = str(e.value)
    assert message.startswith(f"{path / fmt.MANIFEST_FILENAME}: elements.log_mel_norm"), message
    assert "'log_mel'" in message and str(norm_shape) in message, message
    assert f"(it is 'float32' {feature_shape})" in message, message  # both shapes named
    with pytest.raises(replay.ManifestError, match="log_mel_norm"):
        replay_dataset(path)
