"""The one shard checker: read every record of a shard, decode it, compare with the manifest.

Used by `replay.verify_dataset` (raises at the first bad shard) and by ``python -m
pipelines.verify`` (reports every shard). Reads each record once with tf.data (TFRecord length
and data CRC32C checks, decompression for GZIP / ZLIB shards) and decodes it with the manifest's
element specs; imports TensorFlow only, and only when a shard is read.
"""

from __future__ import annotations

import dataclasses
import re

from replay.info import DatasetInfo, ShardInfo

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


def read_shard(info: DatasetInfo, shard: ShardInfo) -> tuple[int, str | None]:
    """(records read, error message or None): reads and decodes every record of `shard`."""
    import tensorflow as tf  # here: importing this module (pipelines.verify) loads no TensorFlow

    from replay.parsing import batch_parser

    parse = batch_parser(info.elements)
    count = tf.Variable(0, dtype=tf.int64)  # records whose CRCs passed; survives an error

    def counted(record: tf.Tensor) -> tf.Tensor:
        with tf.control_dependencies([count.assign_add(1)]):
            return tf.identity(record)

    def decoded(total: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
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
        with tf.control_dependencies(checks):
            return total + size

    records = tf.data.TFRecordDataset(shard.path, compression_type=info.compression_type)
    records = records.map(counted).batch(READ_BATCH)
    try:
        records.reduce(tf.constant(0, tf.int64), decoded)
    except tf.errors.OpError as e:
        read = int(count.numpy())
        return read, f"unreadable after {read} records: {_op_message(e)}"
    return int(count.numpy()), None


def _shape_message(key: str, info: DatasetInfo) -> str:
    spec = info.elements[key]
    shape = list(spec.shape)
    return f"key {key}: the records do not hold {spec.dtype} {shape} as the manifest says"


def _op_message(error: Exception) -> str:
    """TensorFlow's error message without its function-node and op decorations."""
    message = re.sub(r"\{\{[^}]*\}\}\s*", "", getattr(error, "message", str(error)))
    message = re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.S)
    return " ".join(re.sub(r"\[\[\s*\]\]", "", message).split())  # one line


def check_shard(info: DatasetInfo, shard: ShardInfo, size: int | None) -> ShardReport:
    """Checks one shard: exists, byte size, readable (CRCs), decodable, record count.

    Args:
      info: the dataset's info.
      shard: the shard to check.
      size: its size on disk in bytes (None: missing), from one stat by the caller.
    """
    if size is None:
        return ShardReport(shard, None, None, ("missing",))
    problems = []
    if size != shard.num_bytes:
        problems.append(f"{size} bytes, the manifest says {shard.num_bytes}")
    records, error = read_shard(info, shard)
    if error:
        problems.append(error)
    elif records != shard.num_examples:
        problems.append(f"holds {records} records, the manifest says {shard.num_examples}")
    return ShardReport(shard, size, records, tuple(problems))
