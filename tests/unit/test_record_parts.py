"""Part files: TFRecord framing as TensorFlow writes it, runs skipped by input file, unframing."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from transforms.stages import framing, part_ranges, record_parts

RECORDS = [b"", b"x", os.urandom(1000), os.urandom(70_000), b"last"]


def _tf_file(path: str, records: list[bytes]) -> bytes:
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as fh:
        return fh.read()


def test_framing_is_byte_identical_to_tensorflows_writer(tmp_path):
    ours = b"".join(b"".join(framing.frame(r)) for r in RECORDS)
    assert ours == _tf_file(str(tmp_path / "tf.tfrecord"), RECORDS)
    assert sum(framing.framed_size(r) for r in RECORDS) == len(ours)


def test_pieces_go_to_a_local_file_in_order_and_to_any_other_file_object(tmp_path):
    import io

    pieces = [os.urandom(n) for n in range(1, 2 * framing._IOV_PIECES + 7)]  # 3 writev
    expected = b"".join(pieces)
    with open(tmp_path / "local", "wb") as fh:
        fh.write(b"head")  # buffered bytes are flushed first
        assert framing.write_pieces(fh, pieces) == len(expected)
    assert (tmp_path / "local").read_bytes() == b"head" + expected
    other = io.BytesIO()  # no OS file: fileno() raises
    assert framing.write_pieces(other, pieces) == len(expected)
    assert other.getvalue() == expected


def _write_part(out: str, task: int, runs: list[tuple[str, list[bytes]]], executor=None) -> dict:
    writer = record_parts.PartWriter(out, task, executor=executor)
    for path, records in runs:
        writer.write("all", 0, path=path, records=records)
    (part,) = writer.commit()
    return part


@pytest.mark.parametrize("threaded", [False, True])
def test_a_part_is_a_tfrecord_file_with_runs_per_input_file(tmp_path, threaded):
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(1) if threaded else None
    runs = [("a.wav", RECORDS[:2]), ("a.wav", RECORDS[2:3]), ("b.wav", RECORDS[3:])]
    part = _write_part(str(tmp_path), 7, runs, executor)
    assert part["path"].endswith(".tmp/parts/all/00000/000007.records")
    assert part["rows"] == len(RECORDS)
    sizes = [sum(framing.framed_size(r) for r in rs) for rs in (RECORDS[:3], RECORDS[3:])]
    assert part["runs"] == [("a.wav", 3, sizes[0]), ("b.wav", 2, sizes[1])]
    read = [r.numpy() for r in tf.data.TFRecordDataset(part["path"])]
    assert read == RECORDS
    assert os.listdir(os.path.dirname(part["path"])) == ["000007.records"]  # no temporary left


def test_kept_ranges_skip_failed_files_and_concatenate_in_order(tmp_path):
    one = _write_part(str(tmp_path), 1, [("a.wav", RECORDS[:2]), ("b.wav", RECORDS[2:4])])
    two = _write_part(str(tmp_path), 2, [("b.wav", RECORDS[4:]), ("c.wav", RECORDS[:3])])
    parts = [one, two]
    failed = frozenset({"b.wav"})
    assert part_ranges.kept_records(parts, failed) == 5
    ranges = list(part_ranges.kept_ranges(parts, failed))
    assert [(r.path, r.offset) for r in ranges] == [
        (one["path"], 0),
        (two["path"], two["runs"][0][2]),
    ]
    for chunk in (7, 100, 1 << 20):  # blocks cut anywhere, records whole after unframe
        blocks = list(part_ranges.read_ranges(ranges, chunk_bytes=chunk))
        assert all(0 < len(b) <= chunk for b in blocks)
        assert list(framing.unframe(blocks)) == RECORDS[:2] + RECORDS[:3]
    kept = RECORDS[:2] + RECORDS[:3]
    everything = RECORDS[:2] + RECORDS[2:4] + RECORDS[4:] + RECORDS[:3]
    for skip, expected in ((failed, kept), (frozenset(), everything)):
        shard = tmp_path / f"shard-{len(skip)}.tfrecord"
        size = part_ranges.copy_ranges(part_ranges.kept_ranges(parts, skip), str(shard))
        assert size == shard.stat().st_size == sum(framing.framed_size(r) for r in expected)
        assert [r.numpy() for r in tf.data.TFRecordDataset(str(shard))] == expected


def test_a_shard_that_is_one_whole_part_is_linked_not_copied(tmp_path):
    whole = _write_part(str(tmp_path), 1, [("a.wav", RECORDS[:2]), ("b.wav", RECORDS[2:])])
    shard = tmp_path / "linked.tfrecord"
    size = part_ranges.copy_ranges(part_ranges.kept_ranges([whole], frozenset()), str(shard))
    assert os.path.samefile(shard, whole["path"])  # the same inode: no byte written twice
    assert size == shard.stat().st_size and shard.stat().st_nlink == 2
    os.remove(whole["path"])  # what the end-of-job cleanup of .tmp does
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(shard))] == RECORDS
    # part of a part (a failed file's run skipped) or several parts: copied, never linked
    again = _write_part(str(tmp_path), 2, [("a.wav", RECORDS[:2]), ("b.wav", RECORDS[2:])])
    cut = tmp_path / "cut.tfrecord"
    part_ranges.copy_ranges(part_ranges.kept_ranges([again], frozenset({"a.wav"})), str(cut))
    assert cut.stat().st_nlink == 1 and not os.path.samefile(cut, again["path"])
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(cut))] == RECORDS[2:]


def test_a_short_part_or_a_truncated_stream_is_an_error(tmp_path):
    part = _write_part(str(tmp_path), 3, [("a.wav", RECORDS)])
    with open(part["path"], "r+b") as fh:
        fh.truncate(100)
    ranges = list(part_ranges.kept_ranges([part], frozenset()))
    with pytest.raises(ValueError, match="shorter than its runs"):
        list(part_ranges.read_ranges(ranges))
    with pytest.raises(ValueError, match="shorter than its runs"):
        part_ranges.copy_ranges(ranges, str(tmp_path / "shard.tfrecord"))
    framed = b"".join(framing.frame(b"abc"))
    with pytest.raises(ValueError, match="truncated record"):
        list(framing.unframe([framed, framed[:-1]]))


def _starts(records: list[bytes]) -> list[int]:
    """Each record's frame start, counted from the records' lengths (16 bytes of framing)."""
    starts, position = [], 0
    for record in records:
        starts.append(position)
        position += len(record) + 16
    return starts


def test_record_offsets_of_a_stream_cut_anywhere_and_of_a_file(tmp_path):
    data = _tf_file(str(tmp_path / "tf.tfrecord"), RECORDS)
    expected = _starts(RECORDS)
    assert framing.file_offsets(str(tmp_path / "tf.tfrecord")) == expected
    for size in (1, 3, 7, 8, 9, 12, 16, 17, 999, len(data)):  # headers cut at every place
        scan = framing.FrameOffsets()
        for i in range(0, len(data), size):
            scan.feed(data[i : i + size])
        assert scan.finish(name="s") == expected, size
    (tmp_path / "empty").write_bytes(b"")
    assert framing.file_offsets(str(tmp_path / "empty")) == []


def test_record_offsets_of_a_stream_cut_inside_a_record_are_an_error(tmp_path):
    data = _tf_file(str(tmp_path / "tf.tfrecord"), RECORDS)
    scan = framing.FrameOffsets()
    scan.feed(data[:-3])
    with pytest.raises(ValueError, match="cut: its framed records end 3 bytes past its last"):
        scan.finish(name="cut")
    (tmp_path / "cut").write_bytes(data[:-3])
    with pytest.raises(ValueError, match="end 3 bytes past"):
        framing.file_offsets(str(tmp_path / "cut"))
