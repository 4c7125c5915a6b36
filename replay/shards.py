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
from replay.info import DatasetInfo
from replay.offsets import read_offsets
from replay.parsing import batch_parser
from replay.slicing import ShardSpan

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
    spans: Sequence[ShardSpan],
    specs: Mapping[str, fmt.ElementSpec],
    *,
    element_shard: tuple[int, int] = (1, 0),
    shuffle: bool = False,
    seed: int | None = None,
    reshuffle_each_iteration: bool = True,
    block: int | None = None,
    by_id: bool = False,
) -> tf.data.Dataset:
    """The Dataset of per-shard Datasets handed to `reader_func` (one per span, in order).

    Args:
      info: the dataset's info.
      spans: the records to read: runs of shards (`replay.slicing.ShardSpan`; whole shards
        for split names).
      specs: the keys to decode.
      element_shard: (n, i): keep records i, i+n, ... of each span (input_context fallback).
      shuffle: shuffle the shard order.
      seed: shuffle seed.
      reshuffle_each_iteration: reshuffle the shard order each epoch.
      block: None: per-shard datasets of decoded elements (the reader_func contract); else of
        blocks of `block` serialized records, ``[<= block]`` strings, the last block shorter,
        then an empty block (the end-of-shard sentinel; the default reader's; `specs` unused).
      by_id: with `block`, blocks of record ids, ``[<= block]`` int64, instead of records:
        the ids of ``Records(info, spans)`` (the spans' records numbered in order), for the
        caller to read through the random-access layer (`replay.global_reader.BatchRead`)
        once batched; the same blocks, in the same order, as the records they stand for.

    A span of part of a shard ends after its count. The default reader's (`block`) starts at
    its first record's byte offset (format version 4 on: `replay.offsets`, as the global
    order's blocks do); the others skip the records before it, as every reader does before
    format version 4: a per-shard dataset handed to a `reader_func` may be serialized (iterated
    on its own, checkpointed), which TensorFlow's reader from a byte offset (the
    ``TFRecordDatasetV2`` op) refuses: it writes out 3 of the op's 4 inputs.
    """
    num, index = element_shard
    starts = _span_starts(info, spans) if block and not by_id else None
    bases = [0]
    for span in spans:  # each span's first record id in the layer's numbering
        bases.append(bases[-1] + span.count)
    files = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant([s.shard.path for s in spans], tf.string, shape=[len(spans)]),
            tf.constant([s.count for s in spans], tf.int64, shape=[len(spans)]),
            tf.constant([_span_name(s) for s in spans], tf.string, shape=[len(spans)]),
            tf.constant([s.first for s in spans], tf.int64, shape=[len(spans)]),
            tf.constant(starts or [0] * len(spans), tf.int64, shape=[len(spans)]),
            tf.constant([-1 if s.whole else s.count for s in spans], tf.int64, [len(spans)]),
            tf.constant(bases[:-1], tf.int64, shape=[len(spans)]),
        )
    )
    if shuffle and len(spans) > 1:
        files = files.shuffle(
            len(spans), seed=seed, reshuffle_each_iteration=reshuffle_each_iteration
        )
    make = functools.partial(
        _shard_dataset,
        compression_type=info.compression_type,
        parse=None if block else batch_parser(specs, info.elements),
        block=block or PARSE_BATCH,
        num_pipelines=num,
        pipeline_id=index,
        start=_start_mode(spans, starts),
        by_id=bool(block and by_id),
    )
    return files.map(make)


def _span_name(span: ShardSpan) -> str:
    """How the count check names a span: its shard's path (and its records, for a part)."""
    if span.whole:
        return span.shard.path
    return f"{span.shard.path} (records {span.first} to {span.first + span.count})"


def _span_starts(info: DatasetInfo, spans: Sequence[ShardSpan]) -> list[int] | None:
    """Each span's first record's byte offset in its shard, from the shards' record offsets
    (format version 4 on); None when a span starts inside a shard without them."""
    inside = [s for s in spans if s.first]
    if not inside or any(s.shard.offsets_path is None for s in inside):
        return None
    offsets = {s.shard: fmt.parse_offsets(read_offsets(info, s.shard)) for s in inside}
    return [offsets[s.shard][s.first] if s.first else 0 for s in spans]


def _start_mode(spans: Sequence[ShardSpan], starts: list[int] | None) -> str:
    """How the shards are read: "whole" (every span a whole shard: from the start, to the
    end), "offset" (from each span's byte offset) or "skip" (skipping the records before it)."""
    if all(s.whole for s in spans):
        return "whole"
    return "offset" if starts is not None else "skip"


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
    name: tf.Tensor,
    first: tf.Tensor,
    offset: tf.Tensor,
    limit: tf.Tensor,
    base: tf.Tensor,
    *,
    compression_type: str,
    parse: Callable[[tf.Tensor], dict[str, tf.Tensor]] | None,
    block: int,
    num_pipelines: int,
    pipeline_id: int,
    start: str,
    by_id: bool,
) -> tf.data.Dataset:
    """One span's elements decoded (`parse`), or its blocks of `block` serialized records
    (`parse` None), with the record-count check that names the shard (`name`): records `first`
    on (read from byte `offset` with `start` "offset"), `limit` of them (-1: to the end); with
    `by_id`, blocks of the span's record ids ``base ..`` instead (only this pipeline's, with
    `num_pipelines`), which need no count check: the layer reads exactly those records."""
    # A multiple of num_pipelines, so each batch starts at a record index divisible by it.
    read_batch = block * num_pipelines
    if by_id:
        ids = tf.data.Dataset.range(base, base + num_records).batch(read_batch)
        if num_pipelines > 1:
            ids = ids.map(lambda batch: batch[pipeline_id::num_pipelines])
        return ids.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.int64)))
    if start == "offset":
        variant = tf.raw_ops.TFRecordDatasetV2(
            filenames=tf.reshape(path, [1]),
            compression_type=compression_type,
            buffer_size=READ_BUFFER_BYTES,
            byte_offsets=tf.reshape(offset, [1]),
        )
        records = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
    else:
        records = tf.data.TFRecordDataset(
            path, compression_type=compression_type, buffer_size=READ_BUFFER_BYTES
        )
    records = records.ignore_errors(log_warning=True)
    if start == "skip":
        records = records.skip(first)
    if start != "whole":
        records = records.take(limit)
    batches = records.batch(read_batch)
    # Real batches are never empty: an empty batch marks the end of the shard.
    batches = batches.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))

    def count(total: tf.Tensor, batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        size = tf.size(batch, out_type=tf.int64)
        total += size
        message = unreadable_message(tf.strings.join(["shard ", name]), total, num_records)
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
