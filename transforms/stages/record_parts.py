"""Part files: one task's encoded records for one shard, in TFRecord framing.

The read stage encodes each window's ``tf.train.Example`` once and appends it, framed as in a
TFRecord file, to the part file of the shard it belongs to
(``<output_dir>/.tmp/parts/<split>/<shard>/<task>.records``). A part file is therefore a valid
uncompressed TFRecord file, and an uncompressed shard is the byte concatenation of its parts in
task order: the write stage copies bytes and encodes nothing (a shard that is one whole part, as
with the in-memory DirectRunner's single read task, is a hard link to it: nothing is copied).
Each part's description lists its *runs* (consecutive records of one input file, and their byte
length), so the rows of a file that failed part-way (possibly in another task) are skipped
without parsing a record.

Why hand-written framing: TensorFlow's ``TFRecordWriter`` writes a whole file, and Beam's framing
helper is private; the format is 16 bytes around each record (``tensorflow/core/lib/io/
record_writer.h``), and the checksum is google-crc32c's (declared in requirements; also a
dependency of apache-beam[gcp]).
Tests compare the bytes with ``tf.io.TFRecordWriter``'s and read the parts back with tf.data.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import mmap
import os
import shutil
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import BinaryIO

import google_crc32c
from apache_beam.io.filesystems import FileSystems

from replay.storage import is_url
from transforms.stages import atomic

PARTS_DIR = ".tmp/parts"
COPY_CHUNK_BYTES = 8 << 20  # 8 MiB: the write stage's read size when copying parts
_HEADER = struct.Struct("<Q")  # record length, then its masked crc32c, the data, its masked crc32c
_CRC = struct.Struct("<I")
_LEAD_BYTES = _HEADER.size + _CRC.size  # 12: length and its crc, before the data
_FRAME_BYTES = _LEAD_BYTES + _CRC.size  # 16: + the crc of the data
FRAME_BYTES = _FRAME_BYTES  # a record's framed size is its length + this
_AHEAD_WRITES = 4  # record lists waiting for the writer thread (bounds memory)
_IOV_PIECES = 1020  # pieces per os.writev: a multiple of 3 (one frame), within IOV_MAX (1024)


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC-32C of `data` (``tensorflow/core/lib/hash/crc32c.h`` Mask)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> list[bytes]:
    """The pieces of one TFRecord-framed record: header (length + its crc), data, data crc."""
    length = _HEADER.pack(len(record))
    return [length + _CRC.pack(masked_crc32c(length)), record, _CRC.pack(masked_crc32c(record))]


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


def part_path(output_dir: str, *, split: str, shard: int, task: int) -> str:
    return f"{output_dir.rstrip('/')}/{PARTS_DIR}/{split}/{shard:05d}/{task:06d}.records"


class PartWriter:
    """The open part files of one task, one per (split, shard) it routes rows to.

    Parts are written under a temporary name (`transforms.stages.atomic`) and renamed by
    `commit`, so a retried task rewrites identical parts and a killed one leaves no part under
    its final name. Used as a context manager, a block that raises leaves no open file and no
    temporary part behind (`abort`), but for the checkpointed bytes of a part (`checkpoint`:
    a resumed run reuses them). With a
    one-thread `executor`, the writes run there in order while the caller goes on (file writes
    release the GIL; the read stage's thread also runs TFT's analysis).

    `continued`: a task a resumed run continues goes on in its earlier run's temporary parts
    (`transforms.stages.task_commits.continued_parts`: split, shard, path, end, runs): each is cut
    to `end` (its last checkpoint) and appended to, so its shard is still one whole part.
    """

    def __init__(
        self,
        output_dir: str,
        task: int,
        *,
        continued: Sequence[dict] = (),
        executor: Executor | None = None,
    ):
        self._output_dir, self._task = output_dir, task
        self._open: dict[tuple[str, int], tuple] = {}
        self._executor = executor
        self._pending: collections.deque[Future] = collections.deque()
        # checkpoints: (split, shard) -> (runs, bytes) of the part at the last one
        self._marks: dict[tuple[str, int], tuple[int, int]] = {}
        self.written = 0  # framed bytes handed to `write` (counted as written: deterministic)
        try:
            for part in continued:
                self._continue(part)
        except BaseException:
            self.abort()
            raise

    def _continue(self, part: dict) -> None:
        """Opens a continued task's part file, cut to its last checkpoint, for appending."""
        if is_url(part["path"]):
            raise ValueError(f"part {part['path']}: no checkpoint on an object store")
        key = (part["split"], part["shard"])
        final = part_path(self._output_dir, split=key[0], shard=key[1], task=self._task)
        fh = open(part["path"], "r+b")  # noqa: SIM115 - closed by commit / abort
        self._open[key] = (final, part["path"], fh, [list(run) for run in part["runs"]])
        self._marks[key] = (len(part["runs"]), part["end"])
        fh.truncate(part["end"])  # what a killed run wrote past its last checkpoint
        fh.seek(part["end"])

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()

    def abort(self) -> None:
        """Closes every open part and deletes it (a task that raised, or was abandoned): no open
        file and no temporary part stays behind; nothing was committed under a final name."""
        while self._pending:
            with contextlib.suppress(Exception):
                self._pending.popleft().result()
        for key, (_, tmp, fh, _) in self._open.items():
            with contextlib.suppress(Exception):
                fh.close()
            if key not in self._marks:  # a checkpointed part stays: its record names it
                atomic.remove_quietly(tmp)
        self._open.clear()

    def write(self, split: str, shard: int, *, path: str, records: Sequence[bytes]) -> None:
        """Appends `records` (serialized Examples of the input file `path`) to a part."""
        size = sum(len(r) for r in records) + _FRAME_BYTES * len(records)
        self.write_runs(split, shard, records=records, runs=[[path, len(records), size]])

    def write_runs(
        self, split: str, shard: int, *, records: Sequence[bytes], runs: Sequence[list]
    ) -> None:
        """Appends `records` to a part: consecutive runs of input files, each [path, records,
        framed bytes] in order (what the part's description lists), as one hand-off to the
        writer thread. The part's bytes and runs are those of a `write` per run."""
        self.written += sum(run[2] for run in runs)
        if self._executor is None:
            self._append(split, shard, records, runs)
            return
        self._pending.append(self._executor.submit(self._append, split, shard, records, runs))
        while len(self._pending) > _AHEAD_WRITES:
            self._pending.popleft().result()

    def _append(
        self, split: str, shard: int, records: Sequence[bytes], runs: Sequence[list]
    ) -> None:
        key = (split, shard)
        if key not in self._open:
            final = part_path(self._output_dir, split=split, shard=shard, task=self._task)
            tmp = atomic.temp_name(final)
            fh = atomic.open_write(tmp)
            self._open[key] = (final, tmp, fh, [])
        _, _, fh, done = self._open[key]
        pieces = [piece for record in records for piece in frame(record)]
        size = write_pieces(fh, pieces)
        if size != sum(run[2] for run in runs):
            raise ValueError(
                f"part {key}: runs of {sum(run[2] for run in runs)} bytes, {size} written"
            )
        mark = self._marks.get(key, (0, 0))[0]
        for path, count, run_size in runs:
            if len(done) > mark and done[-1][0] == path:  # one run per file and piece
                done[-1][1] += count
                done[-1][2] += run_size
            else:
                done.append([path, count, run_size])

    def checkpoint(self) -> list[dict]:
        """Flushes every open part and describes what each got since the last checkpoint:
        a *piece* of the task (`transforms.stages.task_commits`).

        A description: split, shard, task, path (the part's temporary file), offset
        (where the piece's bytes begin in it), rows and runs. The files stay open and go on.
        Raises: ValueError on an output that cannot be appended to in place (object stores).
        """
        while self._pending:
            self._pending.popleft().result()
        out = []
        for key, (_, tmp, fh, runs) in sorted(self._open.items()):
            if is_url(tmp):
                raise ValueError(f"part {tmp}: no checkpoint on an object store")
            fh.flush()
            first, offset = self._marks.get(key, (0, 0))
            size = sum(run[2] for run in runs)
            if len(runs) > first:
                piece = [tuple(run) for run in runs[first:]]
                split, shard = key
                out.append(
                    {
                        "split": split,
                        "shard": shard,
                        "task": self._task,
                        "path": tmp,
                        "offset": offset,
                        "rows": sum(run[1] for run in piece),
                        "runs": piece,
                    }
                )
            self._marks[key] = (len(runs), size)
        return out

    def commit(self) -> list[dict]:
        """Closes every part and gives it its final name (a rename; a hard link for a part a
        checkpoint record names, which keeps its temporary name); returns their descriptions,
        sorted.

        A description: split, shard, task, path, rows and runs ([input path, records, bytes]).
        """
        while self._pending:
            self._pending.popleft().result()
        out = []
        for (split, shard), (final, tmp, fh, runs) in sorted(self._open.items()):
            fh.close()
            if (split, shard) in self._marks:  # checkpoint records name it: keep that name
                _link_or_copy(tmp, final)
            else:
                atomic.rename(tmp, final)  # a retried task: the same content replaces it
            del self._open[(split, shard)]
            rows = sum(run[1] for run in runs)
            out.append(
                {
                    "split": split,
                    "shard": shard,
                    "task": self._task,
                    "path": final,
                    "rows": rows,
                    "runs": [tuple(run) for run in runs],
                }
            )
        return out


def _link_or_copy(src: str, dst: str) -> None:
    """`dst` the same bytes as the local file `src`, which keeps its name: a hard link, or a copy
    where the filesystem has none. A retried task: the same content replaces `dst`."""
    atomic.remove_quietly(dst)
    try:
        os.link(src, dst)
    except OSError:
        tmp = atomic.temp_name(dst)
        shutil.copyfile(src, tmp)
        atomic.rename(tmp, dst)


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
            while end - start >= _LEAD_BYTES:
                (length,) = _HEADER.unpack_from(buf, start)
                stop = start + _FRAME_BYTES + length
                if stop > end:
                    break
                yield view[start + _LEAD_BYTES : stop - _CRC.size]
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
        while self._next + _HEADER.size <= end:
            at = self._next - self._seen
            if at >= 0:
                (length,) = _HEADER.unpack_from(block, at)
            else:  # the header began in an earlier block
                head = self._tail[at:] + bytes(block[: _HEADER.size + at])
                (length,) = _HEADER.unpack(head)
            self.offsets.append(self._next)
            self._next += _FRAME_BYTES + length
        keep = _HEADER.size
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
        while len(buf) - pos >= _LEAD_BYTES:
            (length,) = _HEADER.unpack_from(buf, pos)
            end = pos + _FRAME_BYTES + length
            if end > len(buf):
                break
            yield bytes(buf[pos + _LEAD_BYTES : pos + _LEAD_BYTES + length])
            pos = end
        del buf[:pos]
    if buf:
        raise ValueError(f"framed records end in {len(buf)} bytes of a truncated record")
