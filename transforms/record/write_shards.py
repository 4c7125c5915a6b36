"""Write stage: a shard's part files -> TFT transform -> serialized Examples -> one shard file.

Planning (`plan_num_shards`, `choose_compression`) is pure; `WriteShardFn` does the work. The
read stage routed every row to its shard's part files (`transforms.record.read_windows`); a shard
is the concatenation of its parts in task order, i.e. sorted by (index, win_start_idx, channel), so
two runs over the same input give byte-identical shards whatever the runner's bundling. The TFT
graph (`transform_fn/`: the class vocabulary) is applied here with `tf.saved_model.load`, batch by
batch, exactly as a server applies it; its z-scored features are not stored (format version 2:
the reader computes them from the statistics in the manifest).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from replay import format as fmt
from transforms.record.examples import encode_examples, raw_float_rows
from transforms.record.file_rows import list_column
from transforms.record.prefetch import ComputePool, prefetch
from transforms.record.preprocessing import RecordLayout, z_score_scope
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


def z_score_statistics(
    loaded: Any, layout: RecordLayout, *, where: str
) -> dict[str, tuple[float, float]]:
    """{feature: (mean, var)}: the statistics TFT's analysis put into the loaded transform_fn/.

    After the analysis, each ``scale_to_z_score`` reads its mean and variance as constants the
    transform function captures; the capture placeholders are named after their consumers in
    the feature's name scope (``z_score_<feature>/sub`` takes the mean, ``.../Sqrt`` the
    variance). Reading them back from the graph gives exactly the float32 values the graph uses,
    so the reader's z-score is bit for bit the graph's (tests compare with TFT's transform).

    Raises:
      RuntimeError: a statistic is not found (a TFT whose graph this does not know).
    """
    function = loaded.transform_fn
    captured = {}
    for fn in getattr(function, "concrete_functions", None) or [function]:
        names = [t.name.split(":")[0] for t in fn.graph.inputs[-len(fn.captured_inputs) :]]
        captured.update(zip(names, fn.captured_inputs, strict=True))
    statistics = {}
    for feature in layout.feature_shapes:
        scope = z_score_scope(feature)
        values = []
        for placeholder in (f"{scope}_sub_y", f"{scope}_sqrt_x"):
            tensor = captured.get(placeholder)
            if tensor is None or tensor.dtype.name != "float32" or tensor.shape.rank != 0:
                raise RuntimeError(
                    f"{where}: no float32 statistic {placeholder!r} in the transform graph "
                    f"(captures: {sorted(captured)})"
                )
            values.append(float(tensor.numpy()))  # a float32 value: exact as a Python float
        statistics[feature] = (values[0], values[1])
    return statistics


class _Transform:
    """The TFT graph written by this run (transform_fn/), applied to raw RecordBatches."""

    def __init__(self, output_dir: str, layout: RecordLayout):
        import tensorflow as tf

        self._tf = tf
        self._loaded = tf.saved_model.load(f"{output_dir.rstrip('/')}/{fmt.TRANSFORM_FN_DIR}")
        self._layout = layout
        self.statistics = (
            z_score_statistics(self._loaded, layout, where=output_dir) if layout.normalize else {}
        )

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Raw batch -> the stored batch: raw columns, float tensors as raw bytes (features in
        ``--feature_dtype``), + target, num_classes. ``<feature>_norm`` is not stored: the
        reader computes it from the statistics in the manifest (format version 2)."""
        tf, n = self._tf, batch.num_rows
        column = lambda key: batch.column(batch.schema.get_field_index(key))  # noqa: E731
        inputs = {fmt.CLASS_KEY: tf.constant(column(fmt.CLASS_KEY).flatten().to_numpy(False))}
        for name, shape in self._layout.feature_shapes.items():  # the graph takes every input
            values = column(name).flatten().to_numpy()
            inputs[name] = tf.constant(values.reshape((n, *shape)))
        out = self._loaded.transform_fn(inputs)
        arrays, names = [], []
        for name, array in zip(batch.schema.names, batch.columns, strict=True):
            if pa.types.is_floating(array.type.value_type):
                dtype = self._layout.feature_dtype if name in self._layout.feature_shapes else ""
                array = raw_float_rows(name, array, stored_dtype=dtype or "float32")
            arrays.append(array)
            names.append(name)
        for key in (fmt.TARGET_KEY, fmt.NUM_CLASSES_KEY):
            arrays.append(list_column(out[key].numpy().reshape(-1).astype(np.int64), 1, pa.int64()))
            names.append(key)
        return pa.RecordBatch.from_arrays(arrays, names=names)


class WriteShardFn(beam.DoFn):
    """((split, shard), [part]) -> one shard file: parts in task order, transformed, encoded.

    Rows of files that failed (side input `errors`) are dropped, so a file is either wholly in
    the dataset or in the error list. The shard is streamed: memory holds a few part batches.
    It is written under a temporary name and renamed, so a retry or a killed worker never leaves
    a half-written shard under its final name.
    """

    def __init__(self, spec: ShardSpec, layout: RecordLayout, *, compute_threads: int = 1):
        self._spec, self._layout, self._threads = spec, layout, compute_threads
        self._bytes = beam.metrics.Metrics.counter("record", "bytes_written")
        self._shards = beam.metrics.Metrics.counter("record", "shards_written")
        self._progress = ProgressFile(spec.output_dir)
        self._transform = None

    def setup(self) -> None:
        self._pool = ComputePool(self._threads, name="audiorecords-encode")

    def teardown(self) -> None:
        self._pool.shutdown()

    def process(
        self, element, compression: str, num_shards: dict, errors: list, transform_written: list
    ) -> Iterator[dict]:
        del transform_written  # orders this stage after WriteTransformFn
        (split, shard), parts = element
        if self._transform is None:
            self._transform = _Transform(self._spec.output_dir, self._layout)
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
        yield {**info, "statistics": self._transform.statistics}  # for the manifest

    def _records(self, parts: list[dict], failed: set[bytes]) -> Iterator[bytes]:
        """The shard's serialized Examples, in part order.

        Part batches are read in a thread and transformed + encoded in the pool (TF ops and
        the record writer release the GIL; encoding mostly holds it) while this thread writes
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
        """Raw batch -> TFT transform -> serialized Examples (`transforms.record.examples`)."""
        return encode_examples(self._transform(batch))


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
