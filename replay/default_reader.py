"""`replay_dataset`'s default reader (no `reader_func`): per-shard datasets of blocks of serialized
records, or of record ids read by id, interleaved, shuffled and batched, decoded once per batch.

Its design, order and defaults are `replay.reader`'s docstring ("By id", "Order", "Autotune").
Owns the default reader's constants (`CYCLE_LENGTH`, `SHUFFLE_MIN_BLOCKS`, `READ_AHEAD_BLOCKS`,
`BY_ID_MIN_RECORD_BYTES`), `default_reader_func`, `shuffle_block_length`, and the helpers the
other pipelines share: this reader's share of per-shard datasets, the cardinality assertion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf

from replay import format as fmt
from replay import storage
from replay.global_reader import (
    BatchRead,
)
from replay.info import DatasetInfo
from replay.parsing import batch_parser
from replay.read_config import PipelineShare, ReadConfig, ReadOutput
from replay.records import Records
from replay.shards import PARSE_BATCH, shard_datasets
from replay.slicing import ShardSpan, span_shards

AUTOTUNE = tf.data.AUTOTUNE


# Shards read at once by the default reader (TFDS's default interleave_cycle_length). With one per
# core, the last shards of an epoch were read by fewer threads than cores (docs/performance.md).
CYCLE_LENGTH = 16


# With a shuffle_buffer the buffer holds records of at least this many blocks.
SHUFFLE_MIN_BLOCKS = 64


# Default reader, default num_parallel_reads: blocks each open shard reads ahead (its prefetch).
READ_AHEAD_BLOCKS = 2


# Records read by id (`_read_by_id`) only when the shards' records average this much: a batch's
# call costs about what TensorFlow's reader spends on records of ~5 KB (docs/performance.md).
BY_ID_MIN_RECORD_BYTES = 6 << 10  # 6 KiB


def default_reader_func(
    datasets: tf.data.Dataset,
    *,
    cycle_length: int | None = None,
    block_length: int = 1,
    num_parallel_calls: int | None = AUTOTUNE,
    deterministic: bool | None = None,
) -> tf.data.Dataset:
    """Interleave the per-shard datasets in parallel, without shuffling.

    `replay_dataset`'s default reader calls it on per-shard datasets of blocks of records (one
    block at a time from each shard); as a `reader_func` it interleaves decoded elements.

    Args:
      datasets: a Dataset of per-shard Datasets (the `reader_func` argument).
      cycle_length: shards read at once (default `CYCLE_LENGTH`, 16).
      block_length: consecutive elements taken from one shard before moving on.
      num_parallel_calls: interleave parallelism (AUTOTUNE by default).
      deterministic: whether the output order is deterministic (None: tf.data's option).

    Returns:
      A Dataset of elements.
    """
    return datasets.interleave(
        lambda shard: shard,
        cycle_length=cycle_length or CYCLE_LENGTH,
        block_length=block_length,
        num_parallel_calls=num_parallel_calls,
        deterministic=deterministic,
    )


def shuffle_block_length(shuffle_buffer: int) -> int:
    """The default block_length with a `shuffle_buffer`: ``PARSE_BATCH`` (64) records at most,
    and at most ``shuffle_buffer // SHUFFLE_MIN_BLOCKS``, at least 1 (module docstring)."""
    return max(1, min(PARSE_BATCH, shuffle_buffer // SHUFFLE_MIN_BLOCKS))


def share_datasets(
    info: DatasetInfo,
    share: PipelineShare,
    specs: Mapping[str, fmt.ElementSpec],
    config: ReadConfig,
    output: ReadOutput,
    *,
    block: int | None = None,
    by_id: bool = False,
) -> tf.data.Dataset:
    """`shard_datasets` of this reader's share of the shards, in its shard order (`block`:
    records per element, None: one record; `by_id`: blocks of record ids)."""
    return shard_datasets(
        info,
        share.spans,
        specs,
        element_shard=share.element_shard,
        shuffle=output.shuffle_shards,
        seed=config.seed,
        reshuffle_each_iteration=config.reshuffle_each_iteration,
        block=block,
        by_id=by_id,
    )


def _read_by_id(
    info: DatasetInfo, spans: Sequence[ShardSpan], config: ReadConfig
) -> BatchRead | None:
    """How the default reader reads batches of record ids through the random-access layer
    (`replay.records`: a batch one call, its frames read and checked outside the GIL), where
    the layer reads: local uncompressed shards with record offsets (format version 4), not
    under the tf.data service (whose worker may run in another process), of records of
    `BY_ID_MIN_RECORD_BYTES` or more on average. None: by TensorFlow's TFRecord reader. A
    shard's offsets are read at its first block."""
    if config.service is not None or info.compression_type:
        return None
    shards = span_shards(spans)
    if not shards or any(s.offsets_path is None or storage.is_url(s.path) for s in shards):
        return None
    records = sum(s.num_examples for s in shards)
    if not records or sum(s.num_bytes for s in shards) < BY_ID_MIN_RECORD_BYTES * records:
        return None
    return BatchRead(Records(info, spans))


def default_pipeline(
    info: DatasetInfo,
    share: PipelineShare,
    specs: Mapping[str, fmt.ElementSpec],
    config: ReadConfig,
    output: ReadOutput,
    *,
    deterministic: bool,
) -> tf.data.Dataset:
    """The default reader: blocks of serialized records, interleaved, decoded once per batch.

    Each shard yields blocks of `block_length` records (its last block shorter), the count check
    runs once per block, and `default_reader_func` interleaves whole blocks, so no per-record
    element crosses the parallel interleave (measured: that hand-off cost more CPU than the
    read). Then: without `shuffle_buffer`, ``rebatch(batch_size)`` (one copy) and one
    ``parse_example`` per output batch; with it, unbatch -> shuffle the serialized records ->
    batch -> parse. The share's total is asserted as the cardinality, but under the tf.data
    service (unknown there).
    """
    shuffle_buffer = output.shuffle_buffer
    block_length = config.block_length or (
        shuffle_block_length(shuffle_buffer) if shuffle_buffer else PARSE_BATCH
    )
    read = _read_by_id(info, share.spans, config)
    by_id = read is not None
    datasets = share_datasets(info, share, specs, config, output, block=block_length, by_id=by_id)
    ds = _interleave_blocks(datasets, config, deterministic=deterministic)
    parse = batch_parser(specs, info.elements)
    total = None if config.service is not None else share.total
    ds = _shuffle_and_batch(ds, config, output, total=total)
    if read is not None:  # batches of record ids, each read in one call and parsed, several
        # at once; in order unless deterministic=False is asked for (reads vary in time more
        # than parses: a map free to reorder would, where TensorFlow's reader keeps the order)
        ds = ds.map(
            lambda ids: parse(read(ids)),
            num_parallel_calls=AUTOTUNE,
            deterministic=config.deterministic is not False,
        )
    else:
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if output.batch_size is None:
        ds = ds.unbatch()
    return assert_count(ds, output, total=total)


def _interleave_blocks(
    datasets: tf.data.Dataset, config: ReadConfig, *, deterministic: bool
) -> tf.data.Dataset:
    """The default reader's interleave of the per-shard datasets of blocks."""
    if config.num_parallel_reads == AUTOTUNE and config.service is None:
        # Each open shard reads ahead in a thread of its own (its prefetch); the interleave only
        # takes its blocks round robin: the order of the parallel interleave with
        # deterministic=True, faster when shuffling (module docstring). Not
        # under the tf.data service: its distributed_epoch mode handed every worker every
        # shard through this interleave (each element twice with 2 workers).
        return datasets.interleave(
            lambda shard: shard.prefetch(READ_AHEAD_BLOCKS),
            cycle_length=config.cycle_length or CYCLE_LENGTH,
        )
    return default_reader_func(
        datasets,
        cycle_length=config.cycle_length,
        num_parallel_calls=config.num_parallel_reads,
        deterministic=deterministic,
    )


def _shuffle_and_batch(
    ds: tf.data.Dataset, config: ReadConfig, output: ReadOutput, *, total: int | None
) -> tf.data.Dataset:
    """Blocks of serialized records -> batches to parse: without a shuffle buffer rebatched to
    `batch_size` (blocks as they are without one); with it unbatched, shuffled and batched
    (by `PARSE_BATCH` without a `batch_size`). Repeated in between with `repeat`."""
    if not output.shuffle_buffer:
        if output.repeat:
            ds = ds.repeat()
        if output.batch_size is not None:
            ds = ds.rebatch(output.batch_size, drop_remainder=output.drop_remainder)
        return ds
    ds = ds.unbatch()
    if total is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(total))
    ds = shuffle_elements(ds, output.shuffle_buffer, config)
    if output.repeat:
        ds = ds.repeat()
    batch_size, drop_remainder = output.batch_size, output.drop_remainder
    return ds.batch(batch_size or PARSE_BATCH, drop_remainder=bool(batch_size and drop_remainder))


def shuffle_elements(ds: tf.data.Dataset, buffer: int, config: ReadConfig) -> tf.data.Dataset:
    """`ds` through a shuffle buffer of `buffer` elements, with the read's seed and reshuffling."""
    return ds.shuffle(
        buffer, seed=config.seed, reshuffle_each_iteration=config.reshuffle_each_iteration
    )


def assert_count(ds: tf.data.Dataset, output: ReadOutput, *, total: int | None) -> tf.data.Dataset:
    """`ds` with its cardinality: `total` elements, in batches of `batch_size`; infinite with
    `repeat` (when there is a record to repeat); unknown when `total` is."""
    if total is None:
        return ds
    if output.repeat:
        if not total:
            return ds
        return ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    count, batch_size = total, output.batch_size
    if batch_size is not None:
        count = total // batch_size if output.drop_remainder else -(-total // batch_size)
    return ds.apply(tf.data.experimental.assert_cardinality(count))
