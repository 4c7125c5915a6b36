"""The records of one input pipeline in the global read order (`replay.global_order`).

Pipeline (graph code; no Python runs per element)::

    epochs from start // N (one, or forever with repeat)
      -> flat_map: the epoch's windows from the one holding `start`
      -> map (parallel, deterministic): one window's records, in the window's order, only this
         pipeline's positions at or after `start`; only the blocks holding them are read, each
         from its first record's offset (record offsets, format version 4)
      -> Dataset of ``[n]`` serialized records per window (n may be 0); with `positions`,
         of (``[n]`` records, ``[n]`` their run positions)

A block is read with TensorFlow's ``TFRecordDatasetV2`` op from a byte offset (the public
``TFRecordDataset`` has no offset argument), so every frame's length and data CRC32C are checked
as in a whole-shard read. A block that yields fewer records than its count (a read error is
logged and ends it) fails the window with an error naming its shards.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from replay import format as fmt
from replay.global_order import Blocks, EpochOrder, GlobalOrder, Slots, plan_blocks
from replay.info import DatasetInfo, ShardInfo
from replay.offsets import read_offsets
from replay.shards import unreadable_message

READ_BUFFER_BYTES = 256 * 1024  # a block read's buffer at most (TFRecordDataset's default)


def pipeline_records(
    info: DatasetInfo,
    shards: Sequence[ShardInfo],
    order: GlobalOrder,
    *,
    slots: Slots,
    repeat: bool,
    positions: bool = False,
) -> tuple[tf.data.Dataset, int | None]:
    """This pipeline's serialized records in the global order, as a Dataset of ``[n]`` string
    vectors (one per window), and their count (None with `repeat`: infinite). With `positions`
    each element is (records, ``[n]`` int64: each record's position in the run), what
    `check_positions` checks.

    Without `repeat` the run ends with the epoch that holds `order.start`.

    Raises:
      NoOffsetsError, MissingShardError, CorruptShardError: a shard's record offsets cannot be
        used (`replay.offsets.read_offsets`).
    """
    blocks = plan_blocks([s.num_examples for s in shards], block_length=order.block_length)
    n = blocks.num_records
    epoch = order.start // n if n else 0
    count = None if repeat else slots.below((epoch + 1) * n) - slots.below(order.start)
    if not n:
        empty = tf.zeros([0], tf.string)
        empty = (empty, tf.zeros([0], tf.int64)) if positions else empty
        return tf.data.Dataset.from_tensors(empty).take(0), 0
    reader = _WindowReader(info, shards, blocks, order, slots, positions=positions)
    epochs = (
        tf.data.Dataset.range(epoch, epoch + 1) if not repeat else tf.data.Dataset.counter(epoch)
    )
    windows = epochs.flat_map(_traced(reader.epoch_windows))
    return (
        windows.map(_traced(reader.read), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True),
        count,
    )


def _traced(fn):
    """`fn` for tf.data to trace as written, without AutoGraph's conversion: these functions are
    graph code with no Python control flow on tensors, so the graph is the same, and converting
    them (parsing their source) was most of a resume's latency (docs/performance.md)."""
    return tf.autograph.experimental.do_not_convert(fn)


def block_extents(
    info: DatasetInfo, shards: Sequence[ShardInfo], blocks: Blocks
) -> tuple[list[int], list[int]]:
    """Each block's byte offset (its first record's) and byte length (to the next block's
    first record, or to its shard's end), from the shards' checked offsets files."""
    starts: dict[int, tuple[int, ...]] = {}
    for i in sorted(set(blocks.shard)):
        starts[i] = fmt.parse_offsets(read_offsets(info, shards[i]))
    offsets, lengths = [], []
    for s, f, c in zip(blocks.shard, blocks.first, blocks.count, strict=True):
        end = starts[s][f + c] if f + c < len(starts[s]) else shards[s].num_bytes
        offsets.append(starts[s][f])
        lengths.append(end - starts[s][f])
    return offsets, lengths


def read_buffers(info: DatasetInfo, lengths: Sequence[int]) -> list[int]:
    """Each block read's buffer: its byte length up to `READ_BUFFER_BYTES` in an uncompressed
    shard (a block of small records is one read of its own bytes, not of 256 KiB), and
    `READ_BUFFER_BYTES` in a compressed one (where the buffer is the compressed stream's, read
    from the shard's start)."""
    if info.compression_type:
        return [READ_BUFFER_BYTES] * len(lengths)
    return [min(READ_BUFFER_BYTES, max(n, 1)) for n in lengths]


class _WindowReader:
    """The tf.data functions of `pipeline_records`: an epoch's windows, a window's records."""

    def __init__(
        self,
        info: DatasetInfo,
        shards: Sequence[ShardInfo],
        blocks: Blocks,
        order: GlobalOrder,
        slots: Slots,
        *,
        positions: bool,
    ):
        self._positions = positions
        self._order = EpochOrder(blocks, seed=order.seed, window_blocks=order.window_blocks)
        self._start = tf.constant(order.start, tf.int64)
        self._n = blocks.num_records
        self._slots = slots
        self._compression = info.compression_type
        num = len(blocks)
        # per block, and one more: `EpochOrder.windows`' padding (no shard, no records)
        paths = [s.path for s in shards]
        self._paths = tf.constant(paths + [""], tf.string)  # by shard; "" for the padding
        self._shard = tf.constant(list(blocks.shard) + [len(paths)], tf.int64, shape=[num + 1])
        offsets, lengths = block_extents(info, shards, blocks)
        self._offset = tf.constant(offsets + [0], tf.int64, shape=[num + 1])
        buffers = read_buffers(info, lengths) + [READ_BUFFER_BYTES]
        self._buffer = tf.constant(buffers, tf.int64, shape=[num + 1])
        self._count = tf.constant(list(blocks.count) + [0], tf.int64, shape=[num + 1])

    def epoch_windows(self, epoch: tf.Tensor) -> tf.data.Dataset:
        """The epoch's windows from the one holding `start`: (epoch, window, its blocks, its
        first record in the epoch, its size)."""
        blocks, firsts, sizes = self._order.windows(epoch)
        into = tf.maximum(self._start - epoch * self._n, 0)  # start's place in this epoch
        first = tf.reduce_sum(tf.cast(firsts <= into, tf.int64)) - 1
        ids = tf.range(first, self._order.num_windows, dtype=tf.int64)
        return tf.data.Dataset.from_tensor_slices(
            (
                tf.fill(tf.shape(ids), epoch),
                ids,
                tf.gather(blocks, ids),
                tf.gather(firsts, ids),
                tf.gather(sizes, ids),
            )
        )

    def _kept(self, positions: tf.Tensor) -> tf.Tensor:
        """Which run `positions` this pipeline yields: at or after start, in its slots."""
        slots = self._slots
        in_batch = positions % slots.global_batch_size
        mine = tf.equal(in_batch // slots.per_pipeline, slots.pipeline)
        return tf.logical_and(positions >= self._start, mine)

    def read(
        self,
        epoch: tf.Tensor,
        window: tf.Tensor,
        blocks: tf.Tensor,
        first: tf.Tensor,
        size: tf.Tensor,
    ) -> tf.Tensor:
        """The window's records this pipeline yields, in the order: ``[n]`` strings (and their
        positions, with `positions`)."""
        source = self._order.window_permutation(epoch, window, size)
        positions = epoch * self._n + first + tf.range(size, dtype=tf.int64)
        kept = self._kept(positions)
        source = tf.boolean_mask(source, kept)  # window record of each output
        counts = tf.gather(self._count, blocks)
        block_first = tf.cumsum(counts, exclusive=True)  # each block's first window record
        owner = tf.searchsorted(block_first, source, side="right") - 1  # block of each output
        needed = tf.math.bincount(
            tf.cast(owner, tf.int32), minlength=tf.size(blocks), maxlength=tf.size(blocks)
        )
        needed = tf.logical_and(needed > 0, counts > 0)
        read_blocks = tf.boolean_mask(blocks, needed)
        read_counts = tf.boolean_mask(counts, needed)
        records = self._read_blocks(read_blocks, read_counts)
        # where each needed block's records begin in `records`
        read_first = tf.scatter_nd(
            tf.where(needed), tf.cumsum(read_counts, exclusive=True), tf.shape(counts, tf.int64)
        )
        index = tf.gather(read_first, owner) + source - tf.gather(block_first, owner)
        if self._positions:
            return tf.gather(records, index), tf.boolean_mask(positions, kept)
        return tf.gather(records, index)

    def _read_blocks(self, blocks: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
        """The records of `blocks`, in order, ``[sum(counts)]``; fails naming their shards when
        one yields fewer than its count."""
        paths = tf.gather(self._paths, tf.gather(self._shard, blocks))
        offsets = tf.gather(self._offset, blocks)
        buffers = tf.gather(self._buffer, blocks)
        parts = tf.data.Dataset.from_tensor_slices((paths, offsets, counts, buffers)).flat_map(
            _traced(self._block)
        )
        expected = tf.reduce_sum(counts)
        records = (
            parts.batch(tf.maximum(expected, 1))
            .concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))
            .take(1)
            .get_single_element()
        )
        got = tf.size(records, out_type=tf.int64)
        shards = tf.strings.reduce_join(tf.unique(paths).y, separator=", ")
        message = unreadable_message(
            tf.strings.join(["a block of shard(s) ", shards]), got, expected
        )
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(got, expected), [message])]):
            return tf.identity(records)

    def _block(
        self, path: tf.Tensor, offset: tf.Tensor, count: tf.Tensor, buffer: tf.Tensor
    ) -> tf.data.Dataset:
        """`count` records of the shard `path` from byte `offset`, read with a `buffer`-byte
        buffer (a dataset of strings)."""
        variant = tf.raw_ops.TFRecordDatasetV2(
            filenames=tf.reshape(path, [1]),
            compression_type=self._compression,
            buffer_size=buffer,
            byte_offsets=tf.reshape(offset, [1]),
        )
        records = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
        return records.ignore_errors(log_warning=True).take(count)


def check_positions(
    ds: tf.data.Dataset, order: GlobalOrder, slots: Slots, *, message: str
) -> tf.data.Dataset:
    """`ds`, a Dataset of (batch, ``[n]`` positions), as a Dataset of its batches, failing with
    `message` (and the first position out of place) where a position is not the next of this
    pipeline's positions from `order.start`."""
    first = slots.below(order.start)  # this pipeline's positions before start
    per, size, pipeline = slots.per_pipeline, slots.global_batch_size, slots.pipeline

    def step(count: tf.Tensor, element):
        batch, positions = element
        j = first + count + tf.range(tf.size(positions, out_type=tf.int64))
        expected = j // per * size + pipeline * per + j % per
        wrong = tf.not_equal(positions, expected)
        at = tf.argmax(tf.concat([tf.cast(wrong, tf.int64), [1]], 0))  # the first wrong one
        zero = tf.zeros([1], tf.int64)  # (what `at` points at when none is)
        text = tf.strings.format(
            "{}: position {} where the order has {}",
            (message, tf.concat([positions, zero], 0)[at], tf.concat([expected, zero], 0)[at]),
        )
        ok = tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong)), [text])
        with tf.control_dependencies([ok]):
            batch = tf.nest.map_structure(tf.identity, batch)
        return count + tf.size(positions, out_type=tf.int64), batch

    return ds.scan(tf.constant(0, tf.int64), _traced(step))
