"""Write stage: a shard's part files (encoded records) -> one shard file.

The shard counts are planned (`pipelines.plan.shard_counts`), the compression chosen by a pure
rule (`transforms.spec.compression`); `WriteShardFn` does the work. The read stage encoded
every row (`transforms.stages.examples.StoredEncoder`) and routed it to its shard's part files
(`transforms.stages.read_windows`, `transforms.stages.record_parts`); a shard is the
concatenation of its parts in task order, i.e. sorted by (index, win_start_idx, channel), so two
runs over the same input give byte-identical shards whatever the runner's bundling. Nothing is
encoded or transformed here: an uncompressed shard is a byte copy of its parts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from replay import format as fmt
from replay.storage import is_url
from transforms.spec.compression import COMPRESSION_LEVEL
from transforms.spec.types import ShardSpec
from transforms.stages import atomic, framing, part_ranges
from transforms.stages.prefetch import ComputePool
from transforms.stages.progress import ProgressFile


class WriteShardFn(beam.DoFn):
    """((split, shard), [part]) -> one shard file: its parts' records in task order.

    The records were encoded by the read stage; an uncompressed shard is its parts' bytes
    copied, or a hard link to its part when it is one whole part file (the in-memory
    DirectRunner's single read task; `transforms.stages.record_parts`), a compressed one their
    records through TensorFlow's record writer. Rows of files that failed (side input
    `errors`) are skipped, so a file is either wholly in the dataset or in the error list. The
    shard is streamed and written under a temporary name, then renamed, so a retry or a killed
    worker never leaves a half-written shard under its final name.

    With `compute_threads` > 1 (the DirectRunner runs every bundle in one thread) the shards of a
    bundle are written that many at a time, and their entries come out at the bundle's end.
    """

    def __init__(self, spec: ShardSpec, *, compute_threads: int = 1):
        self._spec, self._threads = spec, compute_threads
        self._bytes = beam.metrics.Metrics.counter("record", "bytes_written")
        self._shards = beam.metrics.Metrics.counter("record", "shards_written")
        self._progress = ProgressFile(spec.output_dir)

    def setup(self) -> None:
        self._pool = ComputePool(self._threads, name="audiorecords-shards")

    def teardown(self) -> None:
        self._pool.shutdown()

    def start_bundle(self) -> None:
        self._written: list[Future] = []

    def process(self, element, compression: str, num_shards: dict, errors: list) -> Iterator[dict]:
        (split, shard), parts = element
        failed = frozenset(e["path"] for e in errors)
        parts = sorted(parts, key=lambda p: p["task"])
        self._written.append(
            self._pool.submit(
                write_shard,
                spec=self._spec,
                split=split,
                shard=shard,
                num_shards=num_shards[split],
                ranges=self._ranges(parts, failed),
                num_records=part_ranges.kept_records(parts, failed),
                compression=compression,
            )
        )
        if self._threads <= 1:
            yield from self._done()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for info in self._done():
            yield WindowedValue(info, MIN_TIMESTAMP, [GlobalWindow()])

    def _done(self) -> Iterator[dict]:
        """The written shards' entries (raising a write's error), counted here: Beam's counters
        belong to the bundle's thread."""
        written, self._written = self._written, []
        for future in written:
            info = future.result()
            self._bytes.inc(info["num_bytes"])
            self._shards.inc()
            self._progress.add(shards=1)  # its bytes were counted as the read stage wrote them
            yield info

    def _ranges(self, parts: list[dict], failed: frozenset[str]) -> Iterator[part_ranges.ByteRange]:
        """Where the shard's framed records are, in part order, without the failed files' rows."""
        return part_ranges.kept_ranges(parts, failed)


def write_shard(
    *,
    spec: ShardSpec,
    split: str,
    shard: int,
    num_shards: int,
    ranges: Iterable[part_ranges.ByteRange],
    num_records: int,
    compression: str,
) -> dict:
    """Writes one shard file from the `ranges` of part files (TFRecord-framed, `num_records`
    records in all) and its record offsets file; returns its manifest entry {split, shard,
    filename, num_examples, num_bytes, offsets}.

    NONE: the ranges' bytes are the file (a local shard's frame headers are read back for the
    offsets, through a memory map). GZIP / ZLIB: their records go through TensorFlow's record
    writer, and the offsets are those of the uncompressed stream.
    """
    filename = fmt.shard_filename(
        name=spec.name,
        split=split,
        index=shard,
        num_shards=num_shards,
        compression=compression,
    )
    path = f"{spec.output_dir.rstrip('/')}/{filename}"
    tmp = atomic.temp_name(path, directory=f"{spec.output_dir.rstrip('/')}/.tmp")
    with atomic.incomplete_file(path, tmp=tmp):  # a retried shard: the same bytes replace it
        if compression == "NONE" and not is_url(path):
            size = part_ranges.copy_ranges(ranges, tmp)
            offsets = framing.file_offsets(tmp)
        elif compression == "NONE":
            scan = framing.FrameOffsets()
            size = part_ranges.copy_ranges(ranges, tmp, observe=scan.feed)
            offsets = scan.finish(name=filename)
        else:
            records = framing.unframe(part_ranges.read_ranges(ranges))
            offsets, size = _write_compressed(records, tmp, compression)
        if len(offsets) != num_records:
            raise ValueError(
                f"shard {filename}: {len(offsets)} records, its parts list {num_records}"
            )
    return {
        "split": split,
        "shard": shard,
        "filename": filename,
        "num_examples": num_records,
        "num_bytes": size,
        "offsets": write_offsets(spec.output_dir, filename, offsets),
    }


def write_offsets(output_dir: str, shard: str, offsets: Sequence[int]) -> dict[str, Any]:
    """Writes the record offsets file of the shard file named `shard` (`format.offsets_filename`)
    atomically; returns its manifest entry {num_bytes, sha256}."""
    out = output_dir.rstrip("/")
    path = f"{out}/{fmt.offsets_filename(shard)}"
    if not is_url(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    data = fmt.offsets_bytes(offsets)
    atomic.write_bytes_atomically(path, data, tmp=atomic.temp_name(path, directory=f"{out}/.tmp"))
    return fmt.table_digest(data)


def _write_compressed(
    records: Iterable[bytes], tmp: str, compression: str
) -> tuple[list[int], int]:
    """Writes `records` with TensorFlow's GZIP / ZLIB record writer; returns (the records'
    offsets in the uncompressed stream, the file's bytes)."""
    import tensorflow as tf

    options = tf.io.TFRecordOptions(
        compression_type=compression, compression_level=COMPRESSION_LEVEL
    )
    offsets, position = [], 0
    with tf.io.TFRecordWriter(tmp, options) as writer:
        for record in records:
            writer.write(record)
            offsets.append(position)
            position += framing.framed_size(record)
    return offsets, tf.io.gfile.stat(tmp).length
