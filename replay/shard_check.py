"""The one shard checker: read every record of a shard, decode it, compare with the manifest.

Used by `replay.verify_dataset` (raises at the first bad shard) and by ``python -m
pipelines.verify`` (reports every shard). Reads each record once with tf.data (TFRecord length
and data CRC32C checks, decompression for GZIP / ZLIB shards) and decodes it with the manifest's
element specs; imports TensorFlow only, and only when a shard is read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from replay import format as fmt
from replay.errors import ReplayError
from replay.info import DatasetInfo, ShardInfo
from replay.offsets import read_offsets

if TYPE_CHECKING:
    import tensorflow as tf

READ_BATCH = 256  # records decoded per parse call while checking


@dataclasses.dataclass(frozen=True)
class ShardReport:
    """What checking one shard found.

    Attributes:
      shard: the shard as the manifest lists it.
      size: its size on disk in bytes (None: missing).
      records: records read before the end or the first error (None: not read).
      problems: human-readable problems; empty when the shard is sound.
    """

    shard: ShardInfo
    size: int | None
    records: int | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def shard_reader(info: DatasetInfo) -> Callable[[ShardInfo], tuple[int, str | None]]:
    """A reader of `info`'s shards: shard -> (records read, error message or None).

    It reads and decodes every record of a shard. Its graph is built once per dataset, not per
    shard (tracing it costs more than reading a small shard).
    """
    import tensorflow as tf  # here: importing this module (pipelines.verify) loads no TensorFlow

    from replay.parsing import batch_parser

    parse = batch_parser(info.elements)
    count = tf.Variable(0, dtype=tf.int64)  # records whose CRCs passed; survives an error

    def counted(record: tf.Tensor) -> tf.Tensor:
        with tf.control_dependencies([count.assign_add(1)]):
            return tf.identity(record)

    def decoded(batch: tf.Tensor) -> tf.Operation:
        # Every key is decoded and must give one row per record: a value nothing depended on
        # would be pruned from the graph, and a raw key of the wrong shape can still reshape
        # (1024 samples as 2 x [512]), so a shape the records do not hold went unnoticed.
        size = tf.size(batch, out_type=tf.int64)
        checks = [
            tf.debugging.Assert(
                tf.equal(tf.shape(value, out_type=tf.int64)[0], size), [_shape_message(key, info)]
            )
            for key, value in parse(batch).items()
        ]
        return tf.group(checks)

    @tf.function(
        autograph=False,
        input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64)],
    )
    def read_all(path: tf.Tensor, offsets: tf.Tensor) -> tf.Tensor:
        """The index of the first record whose start differs from `offsets` (-1: none; with
        no offsets to check, `offsets` is empty and the result -1)."""
        records = tf.data.TFRecordDataset(path, compression_type=info.compression_type)
        check = tf.size(offsets) > 0

        def step(state: tuple[tf.Tensor, ...], batch: tf.Tensor) -> tuple[tf.Tensor, ...]:
            total, position, first_bad = state
            with tf.control_dependencies([decoded(batch)]):
                size = tf.size(batch, out_type=tf.int64)
            framed = tf.cast(tf.strings.length(batch), tf.int64) + fmt.FRAME_BYTES
            starts = position + tf.cumsum(framed, exclusive=True)
            stored = offsets[total : total + size]
            stored = tf.pad(
                stored, [[0, size - tf.size(stored, out_type=tf.int64)]], constant_values=-1
            )
            wrong = tf.where(tf.not_equal(stored, starts))[:, 0] + total
            first = tf.cond(
                tf.logical_and(check, tf.logical_and(first_bad < 0, tf.size(wrong) > 0)),
                lambda: wrong[0],
                lambda: first_bad,
            )
            return total + size, position + tf.reduce_sum(framed), first

        start = (tf.constant(0, tf.int64), tf.constant(0, tf.int64), tf.constant(-1, tf.int64))
        return records.map(counted).batch(READ_BATCH).reduce(start, step)[2]

    def read(shard: ShardInfo) -> tuple[int, str | None]:
        count.assign(0)
        try:
            offsets = _offsets(info, shard)
        except (ReplayError, ValueError) as e:
            return 0, str(e)
        try:
            first_bad = int(read_all(tf.constant(shard.path), offsets))
        except tf.errors.OpError as e:
            done = int(count.numpy())
            return done, f"unreadable after {done} records: {_op_message(e)}"
        if first_bad >= 0:
            return int(count.numpy()), (
                f"record {first_bad} does not start where its record offsets file says "
                f"({shard.offsets_path})"
            )
        return int(count.numpy()), None

    return read


def _offsets(info: DatasetInfo, shard: ShardInfo) -> tf.Tensor:
    """The shard's record offsets, checked (`replay.offsets`), as int64s; empty before format
    version 4 (nothing to check)."""
    import tensorflow as tf

    if shard.offsets_path is None:
        return tf.zeros([0], tf.int64)
    data = read_offsets(info, shard)
    return tf.io.decode_raw(tf.constant(data), tf.int64, little_endian=True)


def _shape_message(key: str, info: DatasetInfo) -> str:
    spec = info.elements[key]
    shape = list(spec.shape)
    return f"key {key}: the records do not hold {spec.dtype} {shape} as the manifest says"


def _op_message(error: Exception) -> str:
    """TensorFlow's error message without its function-node and op decorations."""
    message = re.sub(r"\{\{[^}]*\}\}\s*", "", getattr(error, "message", str(error)))
    message = re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.S)
    return " ".join(re.sub(r"\[\[\s*\]\]", "", message).split())  # one line


def check_shards(
    info: DatasetInfo, shards: Sequence[ShardInfo], sizes: Sequence[int | None]
) -> list[ShardReport]:
    """Checks each shard: exists, byte size, readable (CRCs), decodable, record count.

    Args:
      info: the dataset's info.
      shards: the shards to check.
      sizes: their sizes on disk in bytes (None: missing), from one stat each by the caller.
    """
    read = shard_reader(info)
    reports = []
    for shard, size in zip(shards, sizes, strict=True):
        if size is None:
            reports.append(ShardReport(shard, None, None, ("missing",)))
            continue
        problems = []
        if size != shard.num_bytes:
            problems.append(f"{size} bytes, the manifest says {shard.num_bytes}")
        records, error = read(shard)
        if error:
            problems.append(error)
        elif records != shard.num_examples:
            problems.append(f"holds {records} records, the manifest says {shard.num_examples}")
        reports.append(ShardReport(shard, size, records, tuple(problems)))
    return reports
