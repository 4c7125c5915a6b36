"""Check a recorded dataset against its manifest: every shard's CRCs, record counts and sizes.

Usage::

    python -m pipelines.verify out/ [--split train]

Reads every record of every shard once with tf.data (TFRecord length and data CRC32C checks,
decompression for GZIP / ZLIB shards) and decodes it with the manifest's element specs, then
compares each shard's record count and byte size with the manifest. Unlike
`replay.verify_dataset`, which stops at the first problem, it checks every shard and names each
bad one.

Exit status: 0 and one line ``OK <dir>: ...`` when every shard is sound; 1 and one ``BAD
<shard>: <problems>`` line per bad shard (then a ``FAILED`` summary line) otherwise, or one
``FAILED`` line when the directory is not a complete dataset (no manifest: a run still writing
or one that died). Imports `replay` and TensorFlow only, never Apache Beam.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence

from replay import _fs
from replay.errors import ReplayError
from replay.info import DatasetInfo, ShardInfo, load_info

READ_BATCH = 256  # records decoded per parse call while verifying


@dataclasses.dataclass(frozen=True)
class ShardReport:
    """What verifying one shard found.

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


def _read_shard(info: DatasetInfo, shard: ShardInfo) -> tuple[int, str | None]:
    """(records read, error message or None): reads and decodes every record of `shard`."""
    import tensorflow as tf

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


def verify_shard(info: DatasetInfo, shard: ShardInfo, size: int | None) -> ShardReport:
    """Checks one shard: exists, byte size, readable (CRCs), decodable, record count."""
    if size is None:
        return ShardReport(shard, None, None, ("missing",))
    problems = []
    if size != shard.num_bytes:
        problems.append(f"{size} bytes, the manifest says {shard.num_bytes}")
    records, error = _read_shard(info, shard)
    if error:
        problems.append(error)
    elif records != shard.num_examples:
        problems.append(f"holds {records} records, the manifest says {shard.num_examples}")
    return ShardReport(shard, size, records, tuple(problems))


def verify(path: str, *, split: str | Sequence[str] | None = None) -> list[ShardReport]:
    """One `ShardReport` per shard of `split` (None: all splits), in manifest order.

    Raises:
      replay.ReplayError: not a complete, readable dataset (IncompleteDatasetError, ...).
    """
    info = load_info(path)  # validates the manifest: shard names are this dataset's own
    shards = info.shard_list(split)
    info.check_paths(shards)  # and no shard is a symlink out of the directory
    sizes = _fs.sizes([shard.path for shard in shards])
    return [verify_shard(info, s, size) for s, size in zip(shards, sizes, strict=True)]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.verify",
        description="Check every shard of an audiorecords dataset against its manifest.",
    )
    parser.add_argument("dataset", help="dataset directory (local path or gs://... URL)")
    parser.add_argument("--split", action="append", help="check only this split (repeatable)")
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> int:
    """Verifies the dataset named in `argv`, prints the result; returns the exit status (0 / 1)."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    path = args.dataset.rstrip("/") or "/"
    try:
        reports = verify(path, split=args.split)
    except ReplayError as e:
        print(f"FAILED {e}")  # replay's messages start with the path
        return 1
    bad = [r for r in reports if not r.ok]
    for report in bad:
        print(f"BAD {report.shard.path}: {'; '.join(report.problems)}")
    if bad:
        print(f"FAILED {path}: {len(bad)} of {len(reports)} shards are bad")
        return 1
    records = sum(r.records or 0 for r in reports)
    size = sum(r.size or 0 for r in reports)
    print(
        f"OK {path}: {len(reports)} shards, {records} records, {size / 1e6:.1f} MB: CRCs, "
        "record counts and sizes match the manifest"
    )
    return 0


if __name__ == "__main__":
    from runners.quiet import quiet_tensorflow

    quiet_tensorflow()  # the problems are in our own lines, not TensorFlow's start-up notices
    sys.exit(run())
