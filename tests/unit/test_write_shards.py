"""The write stage's shard writer (`transforms.stages.write_shards.write_shard`): part files'
byte ranges of TFRecord-framed records -> one shard file and its record offsets file, in each
compression; the shard read back with tf.data holds the ranges' records in order, the offsets
are the records' places in the uncompressed stream, and the manifest entry says the file's
name, records, bytes and offsets digest. A record count other than the parts' is refused, and
no shard is left behind."""

from __future__ import annotations

import hashlib

import pytest

from replay import format as fmt
from transforms.spec.types import ShardSpec
from transforms.stages import framing, part_ranges
from transforms.stages.write_shards import write_shard


def test_write_shard_writes_the_pinned_name_and_entry(tmp_path):
    """Pins the file an (empty) shard is written to and the manifest entry returned for it."""
    (tmp_path / ".tmp").mkdir()
    spec = ShardSpec(output_dir=str(tmp_path), name="birds")
    entry = write_shard(
        spec=spec,
        split="train",
        shard=1,
        num_shards=2,
        ranges=[],
        num_records=0,
        compression="NONE",
    )
    assert entry == {
        "split": "train",
        "shard": 1,
        "filename": "birds-train.tfrecord-00001-of-00002",
        "num_examples": 0,
        "num_bytes": 0,
        "offsets": {"num_bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()},
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".tmp",
        "birds-train.tfrecord-00001-of-00002",
        "offsets",
    ]
    assert [p.name for p in (tmp_path / "offsets").iterdir()] == [
        "birds-train.tfrecord-00001-of-00002.offsets"
    ]


def _part(path, records: list[bytes]) -> list[int]:
    """Writes `records` TFRecord-framed to `path`; returns each record's offset in it."""
    offsets, position = [], 0
    with open(path, "wb") as fh:
        for record in records:
            fh.write(b"".join(framing.frame(record)))
            offsets.append(position)
            position += framing.framed_size(record)
    return offsets


def _records(n: int, seed: int) -> list[bytes]:
    return [hashlib.sha256(f"{seed}-{i}".encode()).digest() * (1 + i % 5) for i in range(n)]


@pytest.mark.parametrize("compression", ["NONE", "GZIP", "ZLIB"])
def test_a_shard_holds_its_ranges_records_in_order_with_their_offsets(tmp_path, compression):
    import tensorflow as tf

    (tmp_path / ".tmp").mkdir()
    a, b = _records(6, seed=0), _records(5, seed=1)
    at_a, at_b = _part(tmp_path / "a.records", a), _part(tmp_path / "b.records", b)
    size_b = (tmp_path / "b.records").stat().st_size
    ranges = [  # part a whole; part b without its records 1 and 2 (a failed file's rows)
        part_ranges.ByteRange(str(tmp_path / "a.records"), 0, at_a[-1] + 16 + len(a[-1])),
        part_ranges.ByteRange(str(tmp_path / "b.records"), 0, at_b[1]),
        part_ranges.ByteRange(str(tmp_path / "b.records"), at_b[3], size_b - at_b[3]),
    ]
    kept = a + [b[0], b[3], b[4]]
    entry = write_shard(
        spec=ShardSpec(output_dir=str(tmp_path), name="ds"),
        split="train",
        shard=0,
        num_shards=1,
        ranges=ranges,
        num_records=len(kept),
        compression=compression,
    )
    filename = fmt.shard_filename(
        name="ds", split="train", index=0, num_shards=1, compression=compression
    )
    path = tmp_path / filename
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type=compression)]
    assert read == kept
    offsets = [sum(framing.framed_size(r) for r in kept[:i]) for i in range(len(kept))]
    data = (tmp_path / fmt.offsets_filename(filename)).read_bytes()
    assert list(fmt.parse_offsets(data)) == offsets
    assert entry == {
        "split": "train",
        "shard": 0,
        "filename": filename,
        "num_examples": len(kept),
        "num_bytes": path.stat().st_size,
        "offsets": {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
    }
    if compression == "NONE":  # an uncompressed shard is its ranges' bytes
        whole = b"".join(
            (tmp_path / r.path).read_bytes()[r.offset : r.offset + r.size] for r in ranges
        )
        assert path.read_bytes() == whole
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_a_record_count_other_than_the_parts_is_refused_and_no_shard_is_left(tmp_path):
    (tmp_path / ".tmp").mkdir()
    records = _records(3, seed=2)
    _part(tmp_path / "a.records", records)
    size = (tmp_path / "a.records").stat().st_size
    with pytest.raises(ValueError) as e:
        write_shard(
            spec=ShardSpec(output_dir=str(tmp_path), name="ds"),
            split="all",
            shard=0,
            num_shards=2,
            ranges=[part_ranges.ByteRange(str(tmp_path / "a.records"), 0, size)],
            num_records=4,
            compression="NONE",
        )
    assert str(e.value) == "shard ds.tfrecord-00000-of-00002: 3 records, its parts list 4"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp", "a.records"]
    assert list((tmp_path / ".tmp").iterdir()) == []
