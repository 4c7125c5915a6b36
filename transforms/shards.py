"""Write stage: transformed RecordBatches -> serialized Examples -> deterministic shard files.

Planning (`plan_num_shards`, `shard_of`, `choose_compression`) is pure; `EncodeFn` and
`WriteShardFn` do the work. Every window goes to the shard a stable hash of its identity picks
(``index``, ``channel``, ``win_start_idx``), and each shard is written sorted by that identity, so
two runs over the same input give byte-identical shards whatever the runner's bundling.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from replay import format as fmt
from transforms import sharding
from transforms.progress import ProgressFile
from transforms.sharding import Sharding

TARGET_SHARD_BYTES = 128 << 20  # 128 MiB per shard when --num_shards is not given
MAX_AUTO_SHARDS = 4096
COMPRESSION_LEVEL = 1  # zlib level 1: same ratio as level 6 on PCM (0.639 vs 0.638), 7x faster
AUTO_MIN_SAVING = 0.2  # AUTO compresses (GZIP) only when a sample shrinks by 20% or more
AUTO_SAMPLE_SIZE = 64  # examples sampled to decide AUTO compression
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
    for little space, so AUTO picks GZIP only when zlib level 1 saves at least 20% on the sample.
    """
    if requested != "AUTO":
        return requested
    raw = b"".join(sample)
    if not raw:
        return "NONE"
    ratio = len(zlib.compress(raw, COMPRESSION_LEVEL)) / len(raw)
    return "GZIP" if ratio <= 1 - AUTO_MIN_SAVING else "NONE"


def _column_values(batch: pa.RecordBatch, key: str, *, default: int | None = None) -> np.ndarray:
    """One value per row of a list<int64> column; `default` for every row if it is absent."""
    i = batch.schema.get_field_index(key)  # -1 when absent (never index with it)
    if i < 0:
        if default is None:
            raise KeyError(f"column {key!r} missing from {batch.schema.names}")
        return np.full(batch.num_rows, default, dtype=np.int64)
    return batch.column(i).flatten().to_numpy(zero_copy_only=False)


class EncodeFn(beam.DoFn):
    """(RecordBatch, passthrough) from TFT -> ((split, shard), (sort_key, serialized Example)).

    Side inputs: ``num_shards`` {split: count}; ``offsets`` (`sharding.file_offsets`, only when
    sharding by rank, else None).
    """

    def __init__(self, sharding: Sharding):
        self._sharding = sharding
        self._encoder = None
        self._example = None

    def setup(self) -> None:
        from tensorflow.core.example import example_pb2
        from tfx_bsl.coders import example_coder

        self._encoder = example_coder.RecordBatchToExamplesEncoder()
        self._example = example_pb2.Example

    def process(self, element: tuple[pa.RecordBatch, dict], num_shards: dict, offsets) -> Iterator:
        batch, unary = element
        if unary:
            raise ValueError(f"unexpected unary passthrough columns: {sorted(unary)}")
        sh = self._sharding
        # The C++ encoder writes the Example's feature map in hash order, which varies between
        # processes; deterministic re-serialisation sorts the keys (upb: ~8 us per 22 KB record).
        examples = [
            self._example.FromString(e).SerializeToString(deterministic=True)
            for e in self._encoder.encode(batch)
        ]
        index = _column_values(batch, fmt.INDEX_KEY)
        start = _column_values(batch, fmt.WIN_START_KEY)
        channel = _column_values(batch, fmt.CHANNEL_KEY, default=0)
        paths = batch.column(batch.schema.get_field_index(fmt.FILEPATH_KEY)).flatten()
        labels = batch.column(batch.schema.get_field_index(fmt.CLASS_KEY)).flatten()
        rows = _rows(batch) if sh.shard_func else None
        for i, example in enumerate(examples):
            key = (int(index[i]), int(channel[i]), int(start[i]))
            split = sharding.split_of(paths[i].as_py().decode(), sh)
            split_rank = 0
            if offsets is not None:
                global_rank, split_rank = sharding.rank_of(*key, offsets, sh)
                if sh.max_elements is not None and global_rank >= sh.max_elements:
                    continue
            n = num_shards[split]
            if sh.shard_func is not None:
                shard = int(sh.shard_func(rows[i])) % n
            else:
                shard = sharding.shard_of(
                    key,
                    label=labels[i].as_py().decode(),
                    split_rank=split_rank,
                    num_shards=n,
                    sharding=sh,
                )
            yield (split, shard), (key, example)


def _rows(batch: pa.RecordBatch) -> list[dict]:
    """Per-row dicts for a user shard_func: scalars unwrapped, other lists as numpy arrays."""
    rows = []
    for row in batch.to_pylist():
        rows.append({k: (v[0] if len(v) == 1 else np.asarray(v)) for k, v in row.items()})
    return rows


def keep_ranked(batch: pa.RecordBatch, offsets, *, config: Sharding) -> Iterator[pa.RecordBatch]:
    """Drops the rows whose global rank is >= max_elements (``--max_elements``)."""
    index = _column_values(batch, fmt.INDEX_KEY)
    start = _column_values(batch, fmt.WIN_START_KEY)
    channel = _column_values(batch, fmt.CHANNEL_KEY, default=0)
    ranks = [
        sharding.rank_of(int(i), int(c), int(s), offsets, config)[0]
        for i, c, s in zip(index, channel, start, strict=True)
    ]
    keep = np.array(ranks, dtype=np.int64) < config.max_elements
    if keep.all():
        yield batch
    elif keep.any():
        yield batch.filter(pa.array(keep))


class WriteShardFn(beam.DoFn):
    """((split, shard), [(sort_key, example)]) -> one shard file, written atomically.

    The file is written under a temporary name and renamed, so a retried bundle or a killed
    worker never leaves a half-written shard under its final name.
    """

    def __init__(self, spec: ShardSpec):
        self._spec = spec
        self._progress = ProgressFile(spec.output_dir)
        self._bytes = beam.metrics.Metrics.counter("record", "bytes_written")
        self._shards = beam.metrics.Metrics.counter("record", "shards_written")

    def process(self, element, compression: str, num_shards: dict) -> Iterator[dict]:
        (split, shard), keyed = element
        records = [example for _, example in sorted(keyed, key=lambda kv: kv[0])]
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
