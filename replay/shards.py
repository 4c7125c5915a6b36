"""The per-shard datasets every reader of `replay` starts from (one per shard file).

Two forms. For a user `reader_func`: each element of the Dataset it receives is the Dataset of
one shard file's *decoded* elements (dicts of tensors, exactly `DatasetInfo.element_spec`), the
contract of `tf.data.Dataset.load`'s reader_func, whose shard datasets also hold decoded
elements; inside, a shard's records are read in batches of `PARSE_BATCH`, decoded with one
`tf.io.parse_example` per batch, then unbatched. For the default reader (``block=n``): the
Dataset of the shard's blocks of n serialized records, decoded later, once per output batch.

Corrupt shards. TensorFlow's own `DataLossError` ("corrupted record at 585", "inflate() failed")
does not name the file. So each shard's record stream goes through
``ignore_errors(log_warning=True)`` (TFRecordDataset moves on to the next file after a read
error, so the rest of a bad shard is skipped and TF's reason is logged), and a `scan` counts the
records actually read, once per block (not per record). A block that brings the count past
the manifest's ``num_examples`` for that shard fails before it is passed on, and a sentinel
empty block at the end of each shard checks that the count equals it; either way, iteration
fails with `tf.errors.InvalidArgumentError` whose message contains::

    replay: shard <path> is corrupt, truncated or unreadable: read 3 of 7 records ...

The count check also catches a shard cut at a record boundary and a shard with extra records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf

from replay import format as fmt
from replay.info import DatasetInfo, ShardInfo
from replay.parsing import batch_parser

PARSE_BATCH = 64  # records per block: decoded per tf.io.parse_example call, interleaved whole
READ_BUFFER_BYTES = 256 * 1024  # TFRecordDataset read buffer per open shard (TF's default)


def reader_options(deterministic: bool) -> tf.data.Options:
    """The options every dataset `replay` returns carries: `deterministic`, autotune off
    (`replay.reader`'s docstring, "Autotune")."""
    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.enabled = False
    return options


def shard_datasets(
    info: DatasetInfo,
    shards: Sequence[ShardInfo],
    specs: Mapping[str, fmt.ElementSpec],
    *,
    element_shard: tuple[int, int] = (1, 0),
    shuffle: bool = False,
    seed: int | None = None,
    reshuffle_each_iteration: bool = True,
    block: int | None = None,
) -> tf.data.Dataset:
    """The Dataset of per-shard Datasets handed to `reader_func` (one per shard, in order).

    Args:
      info: the dataset's info.
      shards: the shards to read.
      specs: the keys to decode.
      element_shard: (n, i): keep records i, i+n, ... of each shard (input_context fallback).
      shuffle: shuffle the shard order.
      seed: shuffle seed.
      reshuffle_each_iteration: reshuffle the shard order each epoch.
      block: None: per-shard datasets of decoded elements (the reader_func contract); else of
        blocks of `block` serialized records, ``[<= block]`` strings, the last block shorter,
        then an empty block (the end-of-shard sentinel; the default reader's; `specs` unused).
    """
    num, index = element_shard
    files = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant([s.path for s in shards], tf.string, shape=[len(shards)]),
            tf.constant([s.num_examples for s in shards], tf.int64, shape=[len(shards)]),
        )
    )
    if shuffle and len(shards) > 1:
        files = files.shuffle(
            len(shards), seed=seed, reshuffle_each_iteration=reshuffle_each_iteration
        )
    make = functools.partial(
        _shard_dataset,
        compression_type=info.compression_type,
        parse=None if block else batch_parser(specs, info.elements),
        block=block or PARSE_BATCH,
        num_pipelines=num,
        pipeline_id=index,
    )
    return files.map(make)


def unreadable_message(what: tf.Tensor, read: tf.Tensor, expected: tf.Tensor) -> tf.Tensor:
    """The error of a record count check: `what` (a shard, the shards of a block) read `read` of
    the `expected` records the manifest lists."""
    return tf.strings.join(
        [
            "replay: ",
            what,
            " is corrupt, truncated or unreadable: read ",
            tf.strings.as_string(read),
            " of ",
            tf.strings.as_string(expected),
            " records the manifest lists (the reader's error, if any, is logged above; "
            "replay.verify_dataset checks every shard)",
        ]
    )


def _shard_dataset(
    path: tf.Tensor,
    num_records: tf.Tensor,
    *,
    compression_type: str,
    parse: Callable[[tf.Tensor], dict[str, tf.Tensor]] | None,
    block: int,
    num_pipelines: int,
    pipeline_id: int,
) -> tf.data.Dataset:
    """One shard file's elements decoded (`parse`), or its blocks of `block` serialized records
    (`parse` None), with the record-count check that names the file."""
    # A multiple of num_pipelines, so each batch starts at a record index divisible by it.
    read_batch = block * num_pipelines
    records = tf.data.TFRecordDataset(
        path, compression_type=compression_type, buffer_size=READ_BUFFER_BYTES
    )
    batches = records.ignore_errors(log_warning=True).batch(read_batch)
    # Real batches are never empty: an empty batch marks the end of the shard.
    batches = batches.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))

    def count(total: tf.Tensor, batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        size = tf.size(batch, out_type=tf.int64)
        total += size
        message = unreadable_message(tf.strings.join(["shard ", path]), total, num_records)
        # A block past the manifest's count fails before it is passed on (so no count check
        # downstream, e.g. assert_cardinality's, sees the extra records first); the end-of-shard
        # sentinel (an empty block) fails when records are missing.
        ok = tf.where(size > 0, total <= num_records, tf.equal(total, num_records))
        check = tf.debugging.Assert(ok, [message])
        with tf.control_dependencies([check]):
            return total, tf.identity(batch)

    batches = batches.scan(tf.constant(0, tf.int64), count)
    if num_pipelines > 1:
        batches = batches.map(lambda batch: batch[pipeline_id::num_pipelines])
    if parse is None:  # the empty sentinel stays: rebatch and unbatch skip it (a filter cost
        return batches  # more CPU per epoch than the whole read, measured)
    return batches.map(parse).unbatch()
