"""TFRecord frames, read and checked without TensorFlow: the masked CRC-32C (`masked_crc32c`),
one record's frame checked (`check_record`), a local shard opened and read (`open_local`,
`pread`), a URL shard's ranged reads (`read_range`, `merge_ranges`, `cut_frames`). The Python
path of `replay.records`; `replay._frames` (C) reads and checks local frames the same way.

Every record is checked as TensorFlow's TFRecord reader checks it
(``tensorflow/core/lib/io/record_reader.cc``): its frame is ``length`` (uint64 LE), the masked
CRC-32C of those 8 bytes, the data, the data's masked CRC-32C; the length must also be the one
the offsets give (the next record's offset, or the shard's end, minus the frame's 16 bytes). A
record that fails raises `CorruptShardError` naming the shard, the record and its byte offset.
The CRC is the ``crc32c`` package's (SSE 4.2 / ARMv8 instructions), falling back to
``google-crc32c``: the layer's own cost per record is then a few microseconds plus a copy.
"""

from __future__ import annotations

import bisect
import io
import os
import stat
import struct
from collections.abc import Iterable

import numpy as np

from replay import storage
from replay.errors import CorruptShardError, MissingShardError, ShardError, ShardSizeError
from replay.info import DatasetInfo, ShardInfo

try:  # the SSE 4.2 / ARMv8 CRC-32C: ~7x google-crc32c's speed on window-sized records
    from crc32c import crc32c as _crc32c
except ImportError:  # pragma: no cover - crc32c is a requirement; google-crc32c comes with Beam
    from google_crc32c import value as _crc32c

FRAME_BYTES = 16  # a record's framing: length (8), its masked CRC (4), the data's masked CRC (4)


_MASK_DELTA = 0xA282EAD8  # tensorflow/core/lib/hash/crc32c.h


_LENGTH = struct.Struct("<QI")  # the record's length and its masked CRC


_CRC = struct.Struct("<I")


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC-32C of `data` (``tensorflow/core/lib/hash/crc32c.h`` Mask)."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def cut_frames(
    ranges: list[tuple[int, int]], reads: list[bytes], begin: np.ndarray, ends: np.ndarray
) -> list[memoryview]:
    """Frames `begin[i]:ends[i]`, cut from the bytes `reads` of `ranges` (`merge_ranges`')."""
    frames = []
    for b, e in zip(begin.tolist(), ends.tolist(), strict=True):
        k = bisect.bisect_right(ranges, (b, float("inf"))) - 1
        start = ranges[k][0]
        frames.append(memoryview(reads[k])[b - start : e - start])
    return frames


def merge_ranges(begin: Iterable[int], ends: Iterable[int], *, gap: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` covering every ``[begin[i], ends[i])``, sorted, ranges
    closer than `gap` bytes merged into one."""
    merged: list[list[int]] = []
    for b, e in sorted(zip(begin, ends, strict=True)):
        if merged and b - merged[-1][1] < gap:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([b, e])
    return [(b, e) for b, e in merged]


def check_record(
    head: bytes | memoryview,
    data: bytes | memoryview,
    foot: bytes | memoryview,
    shard: ShardInfo,
    row: int,
    offset: int,
) -> bytes:
    """The data of one record's frame (`head`: its length and that length's masked CRC;
    `data`; `foot`: the data's masked CRC), checked as TensorFlow's reader checks it."""
    length, length_crc = _LENGTH.unpack_from(head, 0)
    if masked_crc32c(head[:8]) != length_crc:  # first, as TensorFlow: a corrupt shard
        raise _corrupt(shard, row, offset, "corrupted record (length checksum mismatch)")
    if length != len(data):  # a sound length elsewhere: a lying offsets file
        raise _corrupt(
            shard,
            row,
            offset,
            f"its length field says {length} bytes, the record offsets {len(data)} "
            "(a corrupt shard or offsets file)",
        )
    if masked_crc32c(data) != _CRC.unpack_from(foot, 0)[0]:
        raise _corrupt(shard, row, offset, "corrupted record (data checksum mismatch)")
    return bytes(data)  # (the same object when `data` is bytes)


def _corrupt(shard: ShardInfo, row: int, offset: int, reason: str) -> CorruptShardError:
    """The error of a record that fails its checks; `shard_path` names its shard."""
    error = CorruptShardError(f"{shard.path}: record {row} at byte offset {offset}: {reason}")
    error.shard_path = shard.path
    return error


def open_local(info: DatasetInfo, shard: ShardInfo) -> io.FileIO:
    """A local shard opened for reading: a regular file inside the dataset directory of the
    manifest's size."""
    real = storage.outside(info.path, shard.path)
    if real is not None:
        raise CorruptShardError(f"{shard.path}: shard leads outside the dataset, to {real}")
    try:
        file = io.FileIO(shard.path, "r")
    except FileNotFoundError as e:
        raise MissingShardError(f"{shard.path}: shard missing") from e
    st = os.fstat(file.fileno())
    if not stat.S_ISREG(st.st_mode) or st.st_size != shard.num_bytes:
        file.close()
        if not stat.S_ISREG(st.st_mode):
            raise CorruptShardError(f"{shard.path}: not a regular file")
        raise ShardSizeError(
            f"{shard.path}: {st.st_size} bytes, the manifest says {shard.num_bytes} "
            "(truncated or rewritten)"
        )
    return file


def pread(fd: int, shard: ShardInfo, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an open local shard."""
    parts, got = [], 0
    while got < end - start:  # one call reads at most ~2 GiB
        part = os.pread(fd, end - start - got, start + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return _whole(data, shard, start, end)


def read_range(shard: ShardInfo, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a URL shard, one ranged read (`replay.storage.read_range`)."""
    try:
        data = storage.read_range(shard.path, start, end - start)
    except FileNotFoundError as e:  # (gs://) the object is gone
        raise MissingShardError(f"{shard.path}: shard missing") from e
    except OSError as e:  # (gs://) the read failed after its retries: the message names it
        raise ShardError(str(e)) from e
    return _whole(data, shard, start, end)


def _whole(data: bytes, shard: ShardInfo, start: int, end: int) -> bytes:
    """`data`, bytes ``[start, end)`` of `shard`, unless the shard ended before `end`."""
    if len(data) != end - start:
        raise CorruptShardError(
            f"{shard.path}: truncated: {len(data)} of the {end - start} bytes at offset {start} "
            f"(the manifest says {shard.num_bytes} bytes)"
        )
    return data
