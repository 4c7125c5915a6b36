"""The default reader by record id (`replay.reader`, "By id"): where the random-access layer
reads, the ordered reader's blocks are record ids read through `replay.records` once batched.

Every option of the default reader is read both ways from the same uncompressed shards, the
by-id read against TensorFlow's TFRecord reader (the reader with `_read_by_id` returning None,
as it does for GZIP shards), element for element and byte for byte: the same order, the same
values. The path is shown taken (the layer counts the bytes it read) and refused where the
layer does not read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from replay import default_reader as reader_module
from replay import format as fmt
from replay import load_info, replay_dataset
from tests.support.replay_elements import collect, indices
from tests.support.replay_fixtures import flip_byte, write_dataset

# shards end anywhere, an empty one, a shard longer than the 64-record block
COUNTS = {"train": (5, 70, 0, 3, 66), "eval": (2, 4)}
_READ_BY_ID = reader_module._read_by_id


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("by_id"))
    write_dataset(  # records of ~8.5 KB: read by id (BY_ID_MIN_RECORD_BYTES)
        path,
        num_examples_per_shard=COUNTS,
        split_names=["train", "eval"],
        compression="NONE",
        win_len=2048,
        signal_dtype="int32",
        seed=3,
    )
    return path


def _spy(monkeypatch) -> list:
    """Each `_read_by_id` result of the readers built next (None: TensorFlow's reader)."""
    made = []

    def spy(*args, **kwargs):
        made.append(_READ_BY_ID(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(reader_module, "_read_by_id", spy)
    return made


def _both(monkeypatch, path: str, take: int | None = None, **kwargs) -> tuple[list, list]:
    """(elements read by id, elements read by TensorFlow's reader) of the same call, both with
    ``deterministic=True`` (without it or a seed TensorFlow's parse map may reorder batches)."""
    kwargs.setdefault("deterministic", True)
    made = _spy(monkeypatch)
    by_id = replay_dataset(path, **kwargs)
    got = collect(by_id.take(take) if take else by_id)
    if got:  # (a share of only empty shards has nothing to read by id)
        assert made[-1] is not None, "not read by id"
        assert made[-1].records.bytes_read > 0
    monkeypatch.setattr(reader_module, "_read_by_id", lambda *args, **kw: None)
    plain = replay_dataset(path, **kwargs)
    return got, collect(plain.take(take) if take else plain)


def _assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            xa, ya = np.asarray(x[key]), np.asarray(y[key])
            assert xa.dtype == ya.dtype and xa.shape == ya.shape, key
            if xa.dtype == object:  # strings
                assert xa.tolist() == ya.tolist(), key
            else:
                assert xa.tobytes() == ya.tobytes(), key


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"batch_size": 7},
        {"batch_size": 64, "drop_remainder": True},
        {"split": "train[10:130]"},
        {"split": ["eval", "train[:50%]"], "batch_size": 5},
        {"features": ["signal", "log_mel_norm"], "batch_size": 16},
        {"cycle_length": 2, "block_length": 3},
        {"num_parallel_reads": 2, "block_length": 4, "batch_size": 8},
        {"shuffle_shards": True, "seed": 4},
        {"shuffle_buffer": 20, "seed": 7, "batch_size": 9},
        {"shuffle_buffer": 500, "seed": 1, "block_length": 1},
    ],
    ids=str,
)
def test_the_same_elements_as_tensorflow_s_reader(plain, monkeypatch, kwargs):
    got, want = _both(monkeypatch, plain, **kwargs)
    _assert_same(got, want)
    if kwargs == {"deterministic": True}:  # every record once
        assert sorted(indices(got)) == list(range(sum(COUNTS["train"]) + sum(COUNTS["eval"])))


def test_by_id_keeps_the_order_without_a_seed(plain, monkeypatch):
    """Without `deterministic` or a seed the by-id read still yields the interleave's order
    (its read-and-parse map keeps the order unless deterministic=False is asked for)."""
    made = _spy(monkeypatch)

    def flat(ds) -> list[int]:
        return [int(i) for batch in collect(ds) for i in batch["index"]]

    want = flat(replay_dataset(plain, batch_size=7, deterministic=True))
    assert sorted(want) == list(range(sum(COUNTS["train"]) + sum(COUNTS["eval"])))
    for _ in range(3):
        assert flat(replay_dataset(plain, batch_size=7)) == want
    assert all(m is not None for m in made)


def test_repeat_and_input_context_shares(plain, monkeypatch):
    got, want = _both(
        monkeypatch, plain, take=200, split="train", repeat=True, seed=2, shuffle_buffer=30
    )
    _assert_same(got, want)
    for pipeline in range(3):  # more pipelines than some splits' shards: element sharding too
        for split in ("train", "eval"):
            context = tf.distribute.InputContext(
                num_input_pipelines=3, input_pipeline_id=pipeline, num_replicas_in_sync=3
            )
            got, want = _both(monkeypatch, plain, split=split, input_context=context)
            _assert_same(got, want)


def test_each_element_shared_pipeline_reads_only_its_records(plain, monkeypatch):
    """With fewer shards than pipelines each pipeline keeps every n-th record of a block: read
    by id, it reads only those (the layer's byte count)."""
    made = _spy(monkeypatch)
    sizes = []
    for pipeline in range(4):
        context = tf.distribute.InputContext(
            num_input_pipelines=4, input_pipeline_id=pipeline, num_replicas_in_sync=4
        )
        collect(replay_dataset(plain, split="eval", input_context=context))
        sizes.append(made[-1].records.bytes_read)
    whole = replay_dataset(plain, split="eval")
    collect(whole)
    assert sum(sizes) == made[-1].records.bytes_read


def test_not_by_id_where_the_layer_does_not_read_or_records_are_small(tmp_path, monkeypatch):
    """GZIP shards, a dataset without record offsets (format version 3) and records smaller
    than `BY_ID_MIN_RECORD_BYTES` on average read by TensorFlow's reader, as before."""
    big = {"win_len": 2048, "signal_dtype": "int32"}
    cases = {
        "gzip": {"compression": "GZIP", **big},
        "v3": {"format_version": 3, **big},
        "small": {"win_len": 64},  # ~1 KB records: TensorFlow's reader is faster
    }
    for name, kwargs in cases.items():
        path = tmp_path / name
        kwargs.setdefault("compression", "NONE")
        write_dataset(path, num_examples_per_shard=(4, 5), **kwargs)
        made = _spy(monkeypatch)
        assert len(collect(replay_dataset(str(path)))) == 9
        assert made == [None], name
    path = tmp_path / "big"
    write_dataset(path, num_examples_per_shard=(4, 5), compression="NONE", **big)
    made = _spy(monkeypatch)
    assert len(collect(replay_dataset(str(path)))) == 9
    assert made[0] is not None


def test_a_corrupt_record_is_named_with_its_shard_and_offset(tmp_path):
    """Read by id, a record that fails its CRC fails the read naming the shard, the record in
    it and its byte offset (TensorFlow's reader: the shard's count check, "read N of M")."""
    expected = write_dataset(
        tmp_path,
        num_examples_per_shard=(5, 70, 3),
        compression="NONE",
        win_len=2048,
        signal_dtype="int32",
    )
    shard = expected["shards"]["all"][1]
    offsets = fmt.parse_offsets(Path(load_info(tmp_path).shard_list()[1].offsets_path).read_bytes())
    flip_byte(shard, int(offsets[40]) + 12 + 5)  # record 40 of shard 1's data
    ds = replay_dataset(str(tmp_path), split="all[15:65]")  # shard 1's records 10 to 60
    named = (
        f"record 40 at byte offset {int(offsets[40])}: corrupted record \\(data checksum mismatch"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=named) as e:
        collect(ds)
    assert f"shard {shard} is corrupt" in e.value.message
