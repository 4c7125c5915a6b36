"""Byte ranges of part files (`transforms.stages.record_parts`), what the write stage and a
resumed run read of them: the ranges that hold the records of the input files that did not fail
(`kept_ranges`, `kept_records`), read in blocks (`read_ranges`), copied into a shard file (a hard
link for one whole local part, else the kernel's copy, or Beam's file system: `copy_ranges`), or
read as record views (`record_views`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable, Iterator

from apache_beam.io.filesystems import FileSystems

from replay.storage import is_url
from transforms.stages import atomic
from transforms.stages.framing import CRC, FRAME_BYTES, HEADER, LEAD_BYTES

COPY_CHUNK_BYTES = 8 << 20  # 8 MiB: the write stage's read size when copying parts


def kept_records(parts: Iterable[dict], failed: frozenset[str] | set[str]) -> int:
    """How many records `kept_ranges` covers."""
    return sum(n for part in parts for path, n, _ in part["runs"] if path not in failed)


@dataclasses.dataclass(frozen=True)
class ByteRange:
    """`size` bytes of the file `path` from `offset`: whole framed records of a part."""

    path: str
    offset: int
    size: int


def kept_ranges(parts: Iterable[dict], failed: frozenset[str] | set[str]) -> Iterator[ByteRange]:
    """The byte ranges of `parts` that hold records of input files not in `failed`, in order
    (adjacent runs of a part merged)."""
    for part in parts:
        start = end = 0
        for path, _, size in part["runs"]:
            if path in failed:
                if end > start:
                    yield ByteRange(part["path"], start, end - start)
                start = end = end + size
            else:
                end += size
        if end > start:
            yield ByteRange(part["path"], start, end - start)


def read_ranges(
    ranges: Iterable[ByteRange], *, chunk_bytes: int = COPY_CHUNK_BYTES
) -> Iterator[bytes]:
    """The bytes of `ranges`, in blocks of at most `chunk_bytes` (`unframe` gives records)."""
    for r in ranges:
        with FileSystems.open(r.path, compression_type="uncompressed") as fh:
            fh.seek(r.offset)
            size = r.size
            while size > 0:
                block = fh.read(min(size, chunk_bytes))
                if not block:
                    raise ValueError(f"part {r.path} is shorter than its runs")
                size -= len(block)
                yield block


def copy_ranges(
    ranges: Iterable[ByteRange], path: str, *, observe: Callable[[bytes], None] | None = None
) -> int:
    """Writes the bytes of `ranges` to a new file `path`; returns its size.

    A single range that is a whole local part file becomes `path` by a hard link: no byte is copied
    or written twice (the in-memory DirectRunner plans one read task, so every shard without a
    failed file is one part). If more ranges follow, the link is removed and the bytes copied. Other
    local ranges are copied by the kernel (``os.copy_file_range``: no copy through Python, faster
    than read + write); other filesystems through Beam's, each block also handed to `observe` (only
    there: a local shard is read back instead, `file_offsets`). The part's name is deleted with
    ``.tmp`` at the end; the shard keeps the data.
    """
    ranges = iter(ranges)
    size = 0
    if not is_url(path):
        first = next(ranges, None)
        if first is not None and _link_whole(first, path):
            second = next(ranges, None)
            if second is None:
                return first.size
            os.remove(path)  # more ranges follow: a copy after all
            ranges = itertools.chain([second], ranges)
        with open(path, "wb") as out:
            for r in itertools.chain([first] if first is not None else [], ranges):
                if is_url(r.path):
                    raise ValueError(f"part {r.path} is not local like its shard {path}")
                with open(r.path, "rb") as src:
                    size += _copy_range(src.fileno(), out.fileno(), r)
        return size
    with atomic.open_write(path) as out:
        for block in read_ranges(ranges):
            out.write(block)
            if observe is not None:
                observe(block)
            size += len(block)
    return size


def _link_whole(r: ByteRange, path: str) -> bool:
    """Hard-links the part file `r.path` as `path` if `r` is all of it; False: copy instead."""
    if r.offset != 0 or is_url(r.path):
        return False
    try:
        if os.stat(r.path).st_size != r.size:
            return False
        os.link(r.path, path)
    except OSError:  # no hard links on this filesystem (or across devices): copy
        return False
    return True


def _copy_range(src: int, dst: int, r: ByteRange) -> int:
    offset, left = r.offset, r.size
    while left > 0:
        try:
            copied = os.copy_file_range(src, dst, left, offset)
        except OSError:  # e.g. across filesystems on old kernels: copy through Python
            copied = os.write(dst, os.pread(src, min(left, COPY_CHUNK_BYTES), offset))
        if copied == 0:
            raise ValueError(f"part {r.path} is shorter than its runs")
        offset += copied
        left -= copied
    return r.size


def record_views(r: ByteRange, *, block_bytes: int = COPY_CHUNK_BYTES) -> Iterator[memoryview]:
    """The records of the range `r` of a part file, each a view into one reused buffer that is
    valid only until the next is taken (`unframe` copies every record and every block: 2x the
    time of this when a resumed run reads back its parts; checksums are not verified, as there).

    Raises:
      ValueError: the range ends early or in the middle of a record.
    """
    buf = bytearray(min(block_bytes, r.size))  # not more: a fresh buffer is zero-filled
    view = memoryview(buf)
    start = end = 0  # the bytes of buf not yet yielded: buf[start:end]
    left = r.size
    with FileSystems.open(r.path, compression_type="uncompressed") as fh:
        fh.seek(r.offset)
        while True:
            while end - start >= LEAD_BYTES:
                (length,) = HEADER.unpack_from(buf, start)
                stop = start + FRAME_BYTES + length
                if stop > end:
                    break
                yield view[start + LEAD_BYTES : stop - CRC.size]
                start = stop
            if left == 0:
                break
            buf[: end - start] = view[start:end]  # a record's beginning, to the front
            end, start = end - start, 0
            if end == len(buf):  # a record longer than the buffer: a bigger one
                buf = bytearray(min(2 * len(buf), end + left))
                buf[:end] = view[:end]
                view = memoryview(buf)
            n = fh.readinto(view[end : min(len(buf), end + left)])
            if not n:
                raise ValueError(f"part {r.path} is shorter than its runs")
            end += n
            left -= n
    if end > start:
        raise ValueError(f"part {r.path}: its range ends in {end - start} bytes of a record")
