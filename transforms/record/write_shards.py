"""Write stage: a shard's part files -> stored columns -> serialized Examples -> one shard file.

Planning (`plan_num_shards`, `choose_compression`) is pure; `WriteShardFn` does the work. The
read stage routed every row to its shard's part files (`transforms.record.read_windows`); a shard
is the concatenation of its parts in task order, i.e. sorted by (index, win_start_idx, channel), so
two runs over the same input give byte-identical shards whatever the runner's bundling.
``target`` is the planned class list's index (TFT's vocabulary is that list, `finalize` checks
it), so no transform graph runs here; z-scored features are not stored (format version 2: the
reader computes them from the statistics `finalize` reads out of ``transform_fn/``).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from replay import format as fmt
from transforms.record.examples import encode_examples, raw_float_rows
from transforms.record.file_rows import list_column
from transforms.record.prefetch import ComputePool, prefetch
from transforms.record.preprocessing import RecordLayout
from transforms.record.progress import ProgressFile

TARGET_SHARD_BYTES = 128 << 20  # 128 MiB per shard when --num_shards is not given
MAX_AUTO_SHARDS = 4096
COMPRESSION_LEVEL = 1  # zlib level 1: same ratio as level 6 on PCM (0.639 vs 0.638), 7x faster
# AUTO compresses (GZIP) only when a sample at least halves. Measured on the 60-minute benchmark
# corpus (2 cores, benchmarks/RESULTS.md): a 24% saving cost 1.6x the record time (TF's GZIP
# writer: ~27 MB/s) and 2.8x the replay time; PCM and float features rarely do better.
AUTO_MIN_SAVING = 0.5
AUTO_SAMPLE_SIZE = 64  # examples sampled to decide AUTO compression
_AHEAD_BATCHES = 4  # encode batches read / being encoded ahead of the shard writer
_ENCODE_ROWS = 64  # part batches (a read chunk split over shards) are joined up to this size
COMPRESSIONS = ("AUTO", "GZIP", "ZLIB", "NONE")


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """Where shards go: ``<output_dir>/<name>[-<split>].tfrecord-i-of-n``."""

    output_dir: str
    name: str


def plan_num_shards(estimated_bytes: int, *, num_shards: int | None = None) -> int:
    """Shard count: `num_shards` if given, else one per 128 MiB of estimated output (>= 1)."""
    if num_shards is not None:
        if num_shards <= 0:
            raise ValueError(f"--num_shards must be > 0, got {num_shards}")
        return num_shards
    return int(min(MAX_AUTO_SHARDS, max(1, math.ceil(estimated_bytes / TARGET_SHARD_BYTES))))


def choose_compression(requested: str, sample: Sequence[bytes]) -> str:
    """NONE, GZIP or ZLIB. AUTO measures a sample of serialized records.

    Compressing near-incompressible PCM and float features costs CPU at write and at every read
    for little space, so AUTO picks GZIP only when zlib level 1 saves at least half the sample.
    """
    if requested != "AUTO":
        return requested
    raw = b"".join(sample)
    if not raw:
        return "NONE"
    ratio = len(zlib.compress(raw, COMPRESSION_LEVEL)) / len(raw)
    return "GZIP" if ratio <= 1 - AUTO_MIN_SAVING else "NONE"


class _StoredBatch:
    """Raw RecordBatch -> the stored batch: raw columns, float tensors as raw bytes (features in
    ``--feature_dtype``), + ``target`` and ``num_classes``.

    ``target`` is the label's index in the class list fixed at planning (-1 outside it): the
    ids TFT's class vocabulary gives, since that vocabulary is exactly the list (`finalize`
    checks it), so no transform graph runs here. ``<feature>_norm`` is not stored: the reader
    computes it from the statistics in the manifest (format version 2).
    """

    def __init__(self, layout: RecordLayout, classes: Sequence[str]):
        self._layout = layout
        self._ids = {name.encode(): i for i, name in enumerate(classes)}
        self._num_classes = len(classes)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        labels = batch.column(batch.schema.get_field_index(fmt.CLASS_KEY)).flatten()
        target = np.fromiter(
            (self._ids.get(label, -1) for label in labels.to_numpy(False)), np.int64, len(labels)
        )
        arrays, names = [], []
        for name, array in zip(batch.schema.names, batch.columns, strict=True):
            if pa.types.is_floating(array.type.value_type):
                dtype = self._layout.feature_dtype if name in self._layout.feature_shapes else ""
                array = raw_float_rows(name, array, stored_dtype=dtype or "float32")
            arrays.append(array)
            names.append(name)
        num_classes = np.full(batch.num_rows, self._num_classes, np.int64)
        for key, values in ((fmt.TARGET_KEY, target), (fmt.NUM_CLASSES_KEY, num_classes)):
            arrays.append(list_column(values, 1, pa.int64()))
            names.append(key)
        return pa.RecordBatch.from_arrays(arrays, names=names)


class WriteShardFn(beam.DoFn):
    """((split, shard), [part]) -> one shard file: parts in task order, transformed, encoded.

    Rows of files that failed (side input `errors`) are dropped, so a file is either wholly in
    the dataset or in the error list. The shard is streamed: memory holds a few part batches.
    It is written under a temporary name and renamed, so a retry or a killed worker never leaves
    a half-written shard under its final name.
    """

    def __init__(
        self,
        spec: ShardSpec,
        layout: RecordLayout,
        *,
        classes: Sequence[str],
        compute_threads: int = 1,
    ):
        self._spec, self._threads = spec, compute_threads
        self._stored = _StoredBatch(layout, classes)
        self._bytes = beam.metrics.Metrics.counter("record", "bytes_written")
        self._shards = beam.metrics.Metrics.counter("record", "shards_written")
        self._progress = ProgressFile(spec.output_dir)

    def setup(self) -> None:
        self._pool = ComputePool(self._threads, name="audiorecords-encode")

    def teardown(self) -> None:
        self._pool.shutdown()

    def process(self, element, compression: str, num_shards: dict, errors: list) -> Iterator[dict]:
        (split, shard), parts = element
        failed = {e["path"].encode() for e in errors}
        records = self._records(sorted(parts, key=lambda p: p["task"]), failed)
        info = write_shard(
            self._spec,
            split=split,
            shard=shard,
            num_shards=num_shards[split],
            records=records,
            compression=compression,
        )
        self._bytes.inc(info["num_bytes"])
        self._shards.inc()
        self._progress.add(bytes=info["num_bytes"], shards=1)
        yield info

    def _records(self, parts: list[dict], failed: set[bytes]) -> Iterator[bytes]:
        """The shard's serialized Examples, in part order.

        Part batches are read in a thread and converted + encoded in the pool (numpy and the
        record writer release the GIL; encoding mostly holds it) while this thread writes
        earlier ones (`transforms.record.prefetch`); memory holds a few part batches.
        """
        for encoded in prefetch(self._encoded_batches(parts, failed), depth=_AHEAD_BATCHES):
            yield from encoded.result()

    def _encoded_batches(self, parts: list[dict], failed: set[bytes]) -> Iterator:
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in self._kept_batches(parts, failed):
            pending.append(batch)
            rows += batch.num_rows
            if rows >= _ENCODE_ROWS:
                yield self._pool.submit(self._encode, batch=_concat(pending))
                pending, rows = [], 0
        if pending:
            yield self._pool.submit(self._encode, batch=_concat(pending))

    def _kept_batches(self, parts: list[dict], failed: set[bytes]) -> Iterator[pa.RecordBatch]:
        """The parts' batches in order, without the rows of failed files."""
        for part in parts:
            with FileSystems.open(part["path"], compression_type="uncompressed") as fh:
                for batch in pa.ipc.open_stream(fh):
                    if failed:
                        paths = batch.column(batch.schema.get_field_index(fmt.FILEPATH_KEY))
                        keep = ~np.isin(paths.flatten().to_numpy(False), list(failed))
                        batch = batch.filter(pa.array(keep))
                    if batch.num_rows:
                        yield batch

    def _encode(self, batch: pa.RecordBatch) -> list[bytes]:
        """Raw batch -> stored columns -> serialized Examples (`transforms.record.examples`)."""
        return encode_examples(self._stored(batch))


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def write_shard(
    spec: ShardSpec,
    *,
    split: str,
    shard: int,
    num_shards: int,
    records: Iterable[bytes],
    compression: str,
) -> dict:
    """Writes one shard file; returns its manifest entry {split, shard, filename, ...}."""
    import tensorflow as tf

    filename = fmt.shard_filename(
        name=spec.name,
        split=split,
        index=shard,
        num_shards=num_shards,
        compression=compression,
    )
    path = f"{spec.output_dir.rstrip('/')}/{filename}"
    tmp = f"{spec.output_dir.rstrip('/')}/.tmp/{filename}.{_nonce()}"
    level = None if compression == "NONE" else COMPRESSION_LEVEL
    options = tf.io.TFRecordOptions(
        compression_type="" if compression == "NONE" else compression, compression_level=level
    )
    count = 0
    with tf.io.TFRecordWriter(tmp, options) as writer:
        for record in records:
            writer.write(record)
            count += 1
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return {
        "split": split,
        "shard": shard,
        "filename": filename,
        "num_examples": count,
        "num_bytes": tf.io.gfile.stat(path).length,
    }


def _nonce() -> str:
    import os
    import uuid

    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
