"""Random access to a dataset's serialized records: any record by its index, without TensorFlow.

``open_records(path, split=...)`` numbers the records of the chosen splits (or slices of them,
`replay.slicing`) in recorded order, 0 to ``len - 1``, and reads any of them from its shard by
the shard's record offsets (format version 4, `replay.offsets`): record ``i`` is a
(shard, byte offset, length) away. A batched get (`Records.__getitems__`) groups the indices
by shard and reads each shard's records in offset order, the layout of Grain's
``ArrayRecordDataSource`` and TFDS's data sources (keys to shards by bisecting prefix sums).

Every record is checked as TensorFlow's TFRecord reader checks it (`replay.frames`): a record
that fails raises `CorruptShardError` naming the shard, the record and its byte offset.

Storage. Local shards are read with ``os.pread`` (each opened once, on first use; it must be a
regular file inside the dataset with the manifest's size), a record's data straight into the
bytes returned, so each record is copied once. A batch's frames of one shard are read and
checked by `replay._frames` (C, built by setup.py where a compiler is; one ``preadv`` a frame,
the same checks) with the GIL released, so the reads of several batches run in parallel
threads beside the rest of a tf.data pipeline; any frame it cannot read or check is read again
by the Python path here (three ``os.pread`` a frame: head, data, CRC), which names the
failure. Without the extension (no compiler, or a CPU without SSE 4.2) that path reads
everything.
Not a memory map: a mapped shard truncated in place kills the process with SIGBUS at the first
record past its new end, where a short read fails naming the shard. Shards under a URL
are read with ranged reads (`replay.storage.read_range`): the records a batch wants from one
shard are merged into ranges where fewer than `GAP_BYTES` lie between them, and the ranges run
in a pool of `REMOTE_THREADS` threads. On ``gs://`` each range is one exact ranged GET through
google-cloud-storage (retried on 429s, 5xx and dropped connections; a read that still fails
raises `ShardError` naming the shard), not TensorFlow's file system, which reads GCS in blocks
of 64 MiB: a range of one record would be served up to the rest of its shard. Other schemes
go through TensorFlow's file system.

Compressed shards (GZIP / ZLIB) have no random access: a record can only be reached by
decompressing its shard from the start, so `open_records` refuses them, naming the option to
record with (``--compression NONE``) and the ordered reader that reads them.

`Records.bytes_read` counts the bytes this object read from shards (a batch's frames, each
once, and on URLs the gaps merged into ranges; offsets files apart), what tests and benchmarks
compare with an epoch's bytes.
"""

from __future__ import annotations

import dataclasses
import io
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from replay import heap, storage
from replay.errors import (
    CorruptShardError,
    NoRandomAccessError,
)
from replay.frames import (
    FRAME_BYTES,
    check_record,
    cut_frames,
    masked_crc32c,
    merge_ranges,
    open_local,
    pread,
    read_range,
)
from replay.info import DatasetInfo, ShardInfo, load_info
from replay.offsets import read_offsets
from replay.slicing import ShardSpan, read_spans, span_shards

try:  # a batch's local frames read and checked outside the GIL (replay/cut_frames.c, built by
    # setup.py where a C compiler is): reads of several batches then run in parallel threads
    import replay._frames as _native

    if not _native.available():  # no CRC-32C instruction: the Python path below
        _native = None
except ImportError:  # pragma: no cover - an install without the extension
    _native = None

GAP_BYTES = 4 << 10  # 4 KiB: remote records closer than this are read in one range (the
# gap's bytes cost about a request's headers; more read each pipeline's neighbours' records)
REMOTE_THREADS = 8  # ranged reads of one batch in flight at once


@dataclasses.dataclass(frozen=True)
class Location:
    """Where a record is: its shard, its index there and its frame's bytes ``[start, end)``."""

    shard: ShardInfo
    record: int
    start: int
    end: int

    @property
    def length(self) -> int:
        """The record's data bytes (its frame less `FRAME_BYTES`)."""
        return self.end - self.start - FRAME_BYTES


def open_records(
    path: str | os.PathLike,
    *,
    split: str | Sequence[str] | None = None,
    version: int | None = None,
) -> Records:
    """Random access to the serialized records of `split` of the dataset at `path`.

    Args:
      path: the dataset directory: a local path or a URL (``gs://bucket/out``).
      split: a split name, a slice of one (``"train[:10%]"``, `replay.slicing`), or a list of
        them; None: every split, in manifest order.
      version: the dataset version (`load_info`); None: the latest.

    Returns:
      A `Records`: ``len(r)``, ``r[i]`` (bytes: a serialized ``tf.train.Example``) and
      ``r.__getitems__(indices)``.

    Raises:
      NoRandomAccessError: the shards are compressed (GZIP / ZLIB).
      NoOffsetsError: the dataset was written before record offsets (format version 4).
      CorruptShardError: an offsets file disagrees with the manifest (`Records.load_offsets`).
      MissingShardError, ShardSizeError: a shard is missing or not the manifest's size
        (`DatasetInfo.check_shard_files`; a shard changed later fails where it is read).
      Any error of `load_info`, `DatasetInfo.check_shards` and the split's selection.
    """
    info = load_info(path, version=version)
    spans = read_spans(info, split)
    source = Records(info, spans)
    info.check_shard_files(span_shards(spans))  # missing or truncated: named before any read
    source.load_offsets()
    return source


class Records:
    """Records ``0 .. len - 1`` of `spans`, in order (module docstring).

    Thread-safe: `__getitems__` may be called from several threads at once.
    """

    def __init__(self, info: DatasetInfo, spans: Sequence[ShardSpan]):
        if info.compression != "NONE":
            raise NoRandomAccessError(
                f"{info.path}: {info.compression} shards have no random access (a record is "
                "reached by decompressing its shard from the start): read them in order "
                "(replay_dataset without order=), or record with --compression NONE"
            )
        self.info = info
        self.spans = tuple(span for span in spans if span.count)
        shards = {span.shard.path: span.shard for span in self.spans}  # each shard once
        self._shards = list(shards.values())
        self._shard_index = {path: i for i, path in enumerate(shards)}
        self._span_shard = [self._shard_index[span.shard.path] for span in self.spans]
        self._span_first = [span.first for span in self.spans]
        self._starts = np.cumsum([0] + [span.count for span in self.spans], dtype=np.int64)
        self._frames: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(self._shards)
        self._files: list[io.FileIO | None] = [None] * len(self._shards)
        self._lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.bytes_read = 0
        self._in_c = _native is not None  # local frames read by replay._frames
        info.check_paths(self._shards)
        heap.keep_freed_memory()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at `indices`, in that order (repeats allowed).

        Raises:
          IndexError: an index outside ``[-len, len)``.
          CorruptShardError: a record fails its checks (names the shard, record and offset).
          ShardError: (gs://) a ranged read failed after its retries (names the shard).
        """
        shards, rows = self.shards_and_records(indices)
        out: list[bytes | None] = [None] * len(rows)
        for shard in np.unique(shards).tolist():
            at = np.flatnonzero(shards == shard)
            got = self._read_shard(shard, rows[at])
            for i, record in zip(at.tolist(), got, strict=True):
                out[i] = record
        return out  # type: ignore[return-value]

    def shards_and_records(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, ...]:
        """(index of the shard in `shard_list`, record in that shard) of each of `indices`."""
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if index.size and (index.min() < -n or index.max() >= n):
            bad = index[(index < -n) | (index >= n)][0]
            raise IndexError(f"{self.info.path}: record {int(bad)} out of range [0, {n})")
        index = np.where(index < 0, index + n, index)
        span = np.searchsorted(self._starts, index, side="right") - 1
        shards = np.asarray(self._span_shard, np.int64)[span]
        rows = np.asarray(self._span_first, np.int64)[span] + (index - self._starts[span])
        return shards, rows

    def load_offsets(self) -> None:
        """Reads and checks every shard's record offsets now (in parallel for URLs), so a bad
        offsets file fails here rather than at the first record of its shard.

        Raises:
          NoOffsetsError, MissingShardError, CorruptShardError: `replay.offsets.read_offsets`.
        """
        if len(self._shards) > 4 and storage.is_url(self.info.path):
            with ThreadPoolExecutor(REMOTE_THREADS) as pool:
                list(pool.map(self._frame_extents, range(len(self._shards))))
        for shard in range(len(self._shards)):
            self._frame_extents(shard)

    @property
    def shard_list(self) -> list[ShardInfo]:
        """The shards read, in first-use order of the spans (`shards_and_records` indexes it)."""
        return list(self._shards)

    def locate(self, index: int) -> Location:
        """Where record `index` is (reads the shard's offsets file, not the shard)."""
        shards, rows = self.shards_and_records([index])
        shard, row = int(shards[0]), int(rows[0])
        starts, ends = self._frame_extents(shard)
        return Location(self._shards[shard], row, int(starts[row]), int(ends[row]))

    def close(self) -> None:
        """Closes the open shards and the thread pool (also on garbage collection); a later read
        opens them again. Not while another thread reads."""
        with self._lock:
            files, self._files = self._files, [None] * len(self._shards)
            for file in files:
                if file is not None:
                    file.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:  # pickled to worker processes: no files, locks or pool;
        # the manifest's read-only mappings do not pickle: the copy loads the same version again
        state = dict(self.__dict__)
        state.update(_files=[None] * len(self._shards), _pool=None, bytes_read=0)
        state["info"] = (self.info.path, self.info.version)
        del state["_lock"], state["_counter_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        path, version = state.pop("info")
        self.__dict__.update(state)
        self.info = load_info(path, version=version)
        self._lock = threading.Lock()
        self._counter_lock = threading.Lock()
        heap.keep_freed_memory()

    # ------------------------------------------------------------------ reading

    def _frame_extents(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """Each record's frame in the shard, (starts, ends): from its record offsets, checked
        against the manifest once (`read_offsets`) and for order here: each frame at least
        `FRAME_BYTES` after the last, the first at 0."""
        extents = self._frames[shard]
        if extents is None:
            info = self._shards[shard]
            data = read_offsets(self.info, info)
            offsets = np.frombuffer(data, dtype="<u8").astype(np.int64)
            ends = np.append(offsets[1:], info.num_bytes)
            bad = np.flatnonzero(ends - offsets < FRAME_BYTES)
            if offsets.size and offsets[0] != 0:
                bad = np.insert(bad, 0, 0)
            if bad.size:
                r = int(bad[0])
                raise CorruptShardError(
                    f"{info.offsets_path}: record {r} of {info.filename} at offset "
                    f"{int(offsets[r])}, the next at {int(ends[r])}: not a record's frame"
                )
            extents = self._frames[shard] = (offsets, ends)
        return extents

    def _read_shard(self, shard: int, rows: np.ndarray) -> list[bytes]:
        """The records `rows` of shard `shard`, checked, in the order of `rows`."""
        starts, ends = self._frame_extents(shard)
        info = self._shards[shard]
        if storage.is_url(info.path):
            begin = starts[rows]
            frames = self._read_remote(shard, begin, ends[rows])
            return [
                check_record(frame[:12], frame[12:-4], frame[-4:], info, row, b)
                for frame, row, b in zip(frames, rows.tolist(), begin.tolist(), strict=True)
            ]
        # Local: the data read straight into the bytes returned (no second copy of a record),
        # each record once a batch, in offset order (module docstring: C, or Python).
        fd = self._open(shard).fileno()
        unique, where = np.unique(rows, return_inverse=True)
        begin, end = starts[unique], ends[unique]
        got = None
        if self._in_c and _native is not None:  # the same reads and checks in C; any failure
            # is read again below, which names it
            got, _ = _native.read_frames(fd, begin, end)
        if got is None:
            got = [
                self._read_frame(fd, info, row, b, e)
                for row, b, e in zip(unique.tolist(), begin.tolist(), end.tolist(), strict=True)
            ]
        self._count(int((end - begin).sum()))
        return [got[i] for i in where.tolist()]

    @staticmethod
    def _read_frame(fd: int, info: ShardInfo, row: int, b: int, e: int) -> bytes:
        """Record `row`'s data, its frame ``[b, e)`` read in three preads (head, data, CRC)."""
        head = pread(fd, info, b, b + 12)
        data = pread(fd, info, b + 12, e - 4)
        return check_record(head, data, pread(fd, info, e - 4, e), info, row, b)

    def _count(self, n: int) -> None:
        with self._counter_lock:
            self.bytes_read += n

    def _open(self, shard: int) -> io.FileIO:
        file = self._files[shard]
        if file is None:
            with self._lock:
                file = self._files[shard]
                if file is None:
                    file = self._files[shard] = open_local(self.info, self._shards[shard])
        return file

    def _read_remote(self, shard: int, begin: np.ndarray, ends: np.ndarray) -> list[memoryview]:
        """Frames `begin[i]:ends[i]` of a URL shard, by merged ranged reads in the pool."""
        info = self._shards[shard]
        ranges = merge_ranges(begin.tolist(), ends.tolist(), gap=GAP_BYTES)
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(REMOTE_THREADS, "replay-records")
        reads = list(self._pool.map(lambda r: read_range(info, r[0], r[1]), ranges))
        self._count(sum(end - start for start, end in ranges))
        return cut_frames(ranges, reads, begin, ends)


__all__ = [
    "FRAME_BYTES",
    "Location",
    "Records",
    "masked_crc32c",
    "merge_ranges",
    "open_records",
]
