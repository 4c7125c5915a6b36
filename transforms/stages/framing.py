"""TFRecord framing, written and read without TensorFlow: a record's frame (`frame`, its
`masked_crc32c`), frames appended to a file in few system calls (`write_pieces`), and read back
from a stream of framed bytes cut anywhere (`unframe`; where each record starts: `FrameOffsets`,
`file_offsets`). Part files (`transforms.stages.record_parts`) and shards hold such frames.

Why hand-written framing: TensorFlow's ``TFRecordWriter`` writes a whole file, and Beam's framing
helper is private; the format is 16 bytes around each record (``tensorflow/core/lib/io/
record_writer.h``), and the checksum is google-crc32c's (declared in requirements; also a
dependency of apache-beam[gcp]).
Tests compare the bytes with ``tf.io.TFRecordWriter``'s and read the parts back with tf.data.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

import google_crc32c

HEADER = struct.Struct("<Q")  # record length, then its masked crc32c, the data, its masked crc32c
CRC = struct.Struct("<I")
LEAD_BYTES = HEADER.size + CRC.size  # 12: length and its crc, before the data
_FRAME_BYTES = LEAD_BYTES + CRC.size  # 16: + the crc of the data
FRAME_BYTES = _FRAME_BYTES  # a record's framed size is its length + this
_IOV_PIECES = 1020  # pieces per os.writev: a multiple of 3 (one frame), within IOV_MAX (1024)


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC-32C of `data` (``tensorflow/core/lib/hash/crc32c.h`` Mask)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> list[bytes]:
    """The pieces of one TFRecord-framed record: header (length + its crc), data, data crc."""
    length = HEADER.pack(len(record))
    return [length + CRC.pack(masked_crc32c(length)), record, CRC.pack(masked_crc32c(record))]


def write_pieces(fh: BinaryIO, pieces: Sequence[bytes]) -> int:
    """Appends `pieces` to the open file `fh` in order; returns the bytes written.

    A local file gets one ``os.writev`` per `_IOV_PIECES` pieces (a TFRecord frame is 3 pieces:
    one write per record cost more, measured); any other file object
    (tf.io.gfile's for gs://) one ``write`` per piece.
    """
    try:
        fd = fh.fileno()
    except (AttributeError, OSError):  # not an OS file (io.UnsupportedOperation is an OSError)
        for piece in pieces:
            fh.write(piece)
        return sum(map(len, pieces))
    fh.flush()  # anything buffered goes first
    total = 0
    for i in range(0, len(pieces), _IOV_PIECES):
        chunk = pieces[i : i + _IOV_PIECES]
        size = sum(map(len, chunk))
        done = os.writev(fd, chunk)
        if done < size:  # a short write (rare for regular files): write the rest
            rest = memoryview(b"".join(chunk))[done:]
            while rest:
                rest = rest[os.write(fd, rest) :]
        total += size
    return total


def framed_size(record: bytes) -> int:
    return len(record) + _FRAME_BYTES


class FrameOffsets:
    """Where each record of a stream of TFRecord-framed bytes starts, fed in blocks cut anywhere
    (a shard's record offsets, `replay.format.offsets_filename`). Only the 8-byte length of each
    frame is read: nothing is copied but a header cut by a block's end.
    """

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self._seen = 0  # bytes fed so far
        self._next = 0  # where the next frame starts
        self._tail = b""  # the last bytes fed (a header cut by the block's end)

    def feed(self, block: bytes | memoryview | mmap.mmap) -> None:
        """Takes the next `block` of the stream."""
        end = self._seen + len(block)
        while self._next + HEADER.size <= end:
            at = self._next - self._seen
            if at >= 0:
                (length,) = HEADER.unpack_from(block, at)
            else:  # the header began in an earlier block
                head = self._tail[at:] + bytes(block[: HEADER.size + at])
                (length,) = HEADER.unpack(head)
            self.offsets.append(self._next)
            self._next += _FRAME_BYTES + length
        keep = HEADER.size
        self._tail = (
            bytes(block[-keep:]) if len(block) >= keep else (self._tail + bytes(block))[-keep:]
        )
        self._seen = end

    def finish(self, *, name: str) -> list[int]:
        """The offsets, once the whole stream was fed.

        Raises:
          ValueError: the stream ends inside a record (names `name`).
        """
        if self._next != self._seen:
            raise ValueError(
                f"{name}: its framed records end {self._next - self._seen} bytes past its last byte"
            )
        return self.offsets


def file_offsets(path: str) -> list[int]:
    """The record offsets of the local TFRecord file `path` (uncompressed), read through a
    memory map: only the pages that hold a frame header are touched."""
    scan = FrameOffsets()
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
                scan.feed(view)
    return scan.finish(name=path)


def unframe(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The records of a stream of framed bytes cut anywhere (checksums are not verified: parts
    are this job's own intermediate files)."""
    buf = bytearray()
    for block in blocks:
        buf += block
        pos = 0
        while len(buf) - pos >= LEAD_BYTES:
            (length,) = HEADER.unpack_from(buf, pos)
            end = pos + _FRAME_BYTES + length
            if end > len(buf):
                break
            yield bytes(buf[pos + LEAD_BYTES : pos + LEAD_BYTES + length])
            pos = end
        del buf[:pos]
    if buf:
        raise ValueError(f"framed records end in {len(buf)} bytes of a truncated record")
