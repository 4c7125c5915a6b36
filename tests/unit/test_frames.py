"""`replay._frames` (replay/_frames.c): a batch of TFRecord frames read and checked in C.

The extension is built by the README's install (setup.py); these tests fail, not skip, where it
is missing on an x86-64 machine, which has the CRC-32C instruction it needs. Its CRC is compared
with the ``crc32c`` package's on random data of every length around its block sizes, its reads
with ``tf.data.TFRecordDataset``'s on a real TFRecord file, and each kind of broken frame is
shown to be reported by index (records.py then names it: tests/pipeline/test_records.py).
"""

from __future__ import annotations

import os
import platform
import threading

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import records
from replay.records import masked_crc32c
from tests.support.replay_fixtures import flip_byte

if platform.machine() not in ("x86_64", "AMD64"):
    pytest.skip("replay._frames reads only where SSE 4.2's CRC-32C is", allow_module_level=True)
from replay import _frames  # noqa: E402 - built by setup.py: an ImportError here is a failure


def test_the_reader_uses_the_extension_here():
    assert _frames.available()
    assert records._native is _frames


@pytest.mark.parametrize("offset", [0, 1, 3, 7])
@pytest.mark.parametrize(
    "size", [0, 1, 7, 8, 9, 255, 767, 768, 769, 8191, 24575, 24576, 24577, 57346, 100_001]
)
def test_the_masked_crc_is_the_crc32c_package_s(size, offset):
    """Every path of the three-stream CRC (the 8-byte alignment, the 8 KiB and 256-byte
    blocks, the words and bytes after them) at its edges, from any alignment."""
    data = np.random.default_rng(size).integers(0, 256, size + offset, np.uint8).tobytes()
    view = memoryview(data)[offset:]
    assert _frames.masked_crc32c(view) == masked_crc32c(bytes(view))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=30_000))
def test_the_masked_crc_of_any_bytes(data):
    assert _frames.masked_crc32c(data) == masked_crc32c(data)


def _shard(tmp_path, sizes):
    """A TFRecord file written by TensorFlow: (path, its records, each frame's start and end)."""
    rng = np.random.default_rng(len(sizes))
    data = [rng.integers(0, 256, n, np.uint8).tobytes() for n in sizes]
    path = str(tmp_path / "shard.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for d in data:
            writer.write(d)
    ends = np.cumsum([16 + n for n in sizes], dtype=np.int64)
    return path, data, ends - np.array([16 + n for n in sizes], np.int64), ends


def test_frames_read_as_tf_data_reads_them_in_any_order_from_threads(tmp_path):
    sizes = [0, 1, 5000, 57_346, 3, 200_000, 12]
    path, data, starts, ends = _shard(tmp_path, sizes)
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == data
    fd = os.open(path, os.O_RDONLY)
    try:
        got, failed = _frames.read_frames(fd, starts, ends)
        assert (got, failed) == (data, -1)
        order = np.array([5, 0, 2, 2, 6], np.int64)
        results = []

        def read():
            results.append(_frames.read_frames(fd, starts[order], ends[order]))

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [([data[i] for i in order], -1)] * 4
        assert _frames.read_frames(fd, starts[:0], ends[:0]) == ([], -1)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "where",
    ["length", "length crc", "data", "data crc", "truncated", "frame too long", "frame too short"],
)
def test_a_broken_frame_is_reported_by_its_index(tmp_path, where):
    path, _, starts, ends = _shard(tmp_path, [10, 300, 20])
    b = int(starts[1])
    if where == "length":
        flip_byte(path, b + 2)
    elif where == "length crc":
        flip_byte(path, b + 9)
    elif where == "data":
        flip_byte(path, b + 12 + 299)
    elif where == "data crc":
        flip_byte(path, int(ends[1]) - 1)
    elif where == "truncated":
        os.truncate(path, int(ends[1]) - 3)
    elif where == "frame too long":  # offsets that lie: the frame's length field disagrees
        ends = ends.copy()
        ends[1] += 1
    else:
        ends = ends.copy()
        ends[1] -= 1
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _frames.read_frames(fd, starts[:1], ends[:1])[1] == -1  # frame 0 is sound
        assert _frames.read_frames(fd, starts, ends) == (None, 1)
        assert _frames.read_frames(fd, starts[[0, 0, 1]], ends[[0, 0, 1]]) == (None, 2)
    finally:
        os.close(fd)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="int64 of one length"):
        _frames.read_frames(0, np.zeros(2, np.int64), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="frame 0 is not a frame"):
        _frames.read_frames(0, np.zeros(1, np.int64), np.full(1, 15, np.int64))
    with pytest.raises(TypeError):
        _frames.read_frames(0, [0], [16])
