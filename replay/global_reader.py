"""The records of one input pipeline in the global read order (`replay.global_order`).

Pipeline (graph code, but one Python call per batch: `replay.records` reads its frames with the
GIL released, so several batches are read at once)::

    epochs from start // N (one, or forever with repeat)
      -> flat_map: the epoch's windows from the one holding `start`
      -> map: a window's record ids in the window's order, only this pipeline's positions at or
         after `start` (the order's arithmetic: no record is read here)
      -> rebatch(batch_size): ``[b]`` record ids
      -> map (parallel, deterministic): the batch's records, read by id from the
         random-access layer (`replay.records`: each record's frame checked, the batch's
         records of one shard read together), ``[b]`` serialized records

Only the records of this pipeline's positions are read: with W pipelines each reads about 1/W of
an epoch's bytes, and a resume reads nothing before `start`.

The block path. Two cases have no random access and read as before: shards compressed with GZIP
/ ZLIB (a record is reached by decompressing its shard from the start) and the tf.data service
(its worker runs the graph in another process, where the layer's Python call does not exist).
There each window's blocks are read with TensorFlow's ``TFRecordDatasetV2`` op from a byte
offset (the public ``TFRecordDataset`` has no offset argument), so every frame's length and data
CRC32C are checked as in a whole-shard read. A block that yields fewer records than its count (a
read error is logged and ends it) fails the window with an error naming its shards. Both paths
give the same elements in the same order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from replay import format as fmt
from replay.errors import ShardError
from replay.global_order import Blocks, EpochOrder, GlobalOrder, Slots, plan_blocks
from replay.info import DatasetInfo
from replay.offsets import read_offsets
from replay.records import Records
from replay.shards import unreadable_message
from replay.slicing import ShardSpan

READ_BUFFER_BYTES = 256 * 1024  # a block read's buffer at most (TFRecordDataset's default)
READ_CALLS = tf.data.AUTOTUNE  # batches read at once (each read releases the GIL: replay/_frames.c)


def random_access(info: DatasetInfo, *, served: bool) -> bool:
    """Whether the global order reads by record id (`pipeline_batches`) or by blocks
    (`pipeline_records`): by id unless the shards are compressed or the tf.data service runs
    the reading (module docstring)."""
    return not info.compression_type and not served


def run_count(
    spans: Sequence[ShardSpan], order: GlobalOrder, slots: Slots, *, repeat: bool
) -> int | None:
    """This pipeline's elements in the run: None with `repeat` (infinite); else its positions
    from `order.start` to the end of the epoch holding it."""
    n = sum(span.count for span in spans)
    if repeat:
        return None
    if not n:
        return 0
    epoch = order.start // n
    return slots.below((epoch + 1) * n) - slots.below(order.start)


def pipeline_batches(
    records: Records,
    order: GlobalOrder,
    *,
    slots: Slots,
    repeat: bool,
    batch_size: int,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """This pipeline's serialized records in the global order, read by id from `records`, as a
    Dataset of ``[batch_size]`` string vectors (the last shorter unless `drop_remainder`).

    Without `repeat` the run ends with the epoch that holds `order.start`.

    Raises (while iterated, as `tf.errors.InvalidArgumentError` with the layer's message):
      CorruptShardError, ShardSizeError, MissingShardError: a record cannot be read (names
        the shard, the record and its byte offset).
    """
    spans = records.spans
    blocks = _span_blocks(spans, order)
    if not blocks.num_records:
        return tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)).take(0)
    base = np.cumsum([0] + [span.count for span in spans], dtype=np.int64)
    ids = _WindowIds(blocks, base, order, slots)
    windows = _epochs(blocks, order, repeat=repeat).flat_map(_traced(ids.epoch_windows))
    batches = windows.map(_traced(ids.ids)).rebatch(batch_size, drop_remainder=drop_remainder)
    read = BatchRead(records)
    return batches.map(_traced(read), num_parallel_calls=READ_CALLS, deterministic=True)


@dataclasses.dataclass(frozen=True)
class BatchRead:
    """A batch of record ids -> the records (one `Records.__getitems__` in a numpy_function):
    the global order's read, and the ordered reader's where it reads by id (`replay.shards`)."""

    records: Records

    def __call__(self, ids: tf.Tensor) -> tf.Tensor:
        out = tf.numpy_function(self._read, [ids], tf.string, stateful=True)
        return tf.ensure_shape(out, ids.shape)

    def _read(self, ids: np.ndarray) -> np.ndarray:
        out = np.empty(len(ids), dtype=object)
        try:
            out[:] = self.records.__getitems__(ids)
        except ShardError as e:  # a ValueError is tf.errors.InvalidArgumentError in the graph,
            # the block path's and the ordered reader's error, worded as theirs
            shard = getattr(e, "shard_path", "")
            raise ValueError(
                f"replay: shard {shard} is corrupt, truncated or unreadable: {e}"
            ) from e
        return out


def _span_blocks(spans: Sequence[ShardSpan], order: GlobalOrder) -> Blocks:
    """The blocks of the spans' records: ``Blocks.shard`` the span, ``first`` counted in it."""
    return plan_blocks([span.count for span in spans], block_length=order.block_length)


class _Windows:
    """What both paths share: an epoch's windows from the one holding `start`, and which of a
    window's positions this pipeline yields."""

    def __init__(self, blocks: Blocks, order: GlobalOrder, slots: Slots):
        self._order = EpochOrder(blocks, seed=order.seed, window_blocks=order.window_blocks)
        self._start = tf.constant(order.start, tf.int64)
        self._n = blocks.num_records
        self._slots = slots
        self._count = tf.constant(list(blocks.count) + [0], tf.int64, shape=[len(blocks) + 1])

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

    def _sources(self, epoch, window, blocks, first, size):
        """The window's kept outputs: (window record of each, in the order; their positions;
        each one's block, as an index into `blocks`; each block's first window record)."""
        source = self._order.window_permutation(epoch, window, size)
        positions = epoch * self._n + first + tf.range(size, dtype=tf.int64)
        kept = self._kept(positions)
        source = tf.boolean_mask(source, kept)  # window record of each output
        counts = tf.gather(self._count, blocks)
        block_first = tf.cumsum(counts, exclusive=True)  # each block's first window record
        owner = tf.searchsorted(block_first, source, side="right") - 1  # block of each output
        return source, tf.boolean_mask(positions, kept), owner, block_first


class _WindowIds(_Windows):
    """The random-access path's window function: a window's kept record ids, in order."""

    def __init__(self, blocks: Blocks, base: np.ndarray, order: GlobalOrder, slots: Slots):
        super().__init__(blocks, order, slots)
        # each block's first record id (its span's first id + its first record), and the padding
        first_ids = [int(base[s]) + f for s, f in zip(blocks.shard, blocks.first, strict=True)]
        self._first_id = tf.constant(first_ids + [0], tf.int64, shape=[len(blocks) + 1])

    def ids(self, epoch, window, blocks, first, size) -> tf.Tensor:
        """The record ids of the window's outputs this pipeline yields, in the order, ``[n]``."""
        source, _, owner, block_first = self._sources(epoch, window, blocks, first, size)
        block_ids = tf.gather(tf.gather(self._first_id, blocks), owner)
        return block_ids + source - tf.gather(block_first, owner)


def pipeline_records(
    info: DatasetInfo,
    spans: Sequence[ShardSpan],
    order: GlobalOrder,
    *,
    slots: Slots,
    repeat: bool,
    positions: bool = False,
) -> tf.data.Dataset:
    """The block path (module docstring): this pipeline's serialized records in the global
    order, as a Dataset of ``[n]`` string vectors (one per window; their count: `run_count`).
    With `positions` each element is (records, ``[n]`` int64: each record's position in the
    run), what `check_positions` checks.

    Without `repeat` the run ends with the epoch that holds `order.start`.

    Raises:
      NoOffsetsError, MissingShardError, CorruptShardError: a shard's record offsets cannot be
        used (`replay.offsets.read_offsets`).
    """
    blocks = _span_blocks(spans, order)
    if not blocks.num_records:
        empty = tf.zeros([0], tf.string)
        empty = (empty, tf.zeros([0], tf.int64)) if positions else empty
        return tf.data.Dataset.from_tensors(empty).take(0)
    reader = _WindowReader(info, spans, blocks, order, slots, positions=positions)
    windows = _epochs(blocks, order, repeat=repeat).flat_map(_traced(reader.epoch_windows))
    return windows.map(
        _traced(reader.read), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def _epochs(blocks: Blocks, order: GlobalOrder, *, repeat: bool) -> tf.data.Dataset:
    """The run's epochs from the one holding `order.start`: that one, or on forever."""
    epoch = order.start // blocks.num_records
    if repeat:
        return tf.data.Dataset.counter(epoch)
    return tf.data.Dataset.range(epoch, epoch + 1)


def _traced(fn):
    """`fn` for tf.data to trace as written, without AutoGraph's conversion: these functions are
    graph code with no Python control flow on tensors, so the graph is the same, and converting
    them (parsing their source) was most of a resume's latency (docs/performance.md)."""
    return tf.autograph.experimental.do_not_convert(fn)


def block_extents(
    info: DatasetInfo, spans: Sequence[ShardSpan], blocks: Blocks
) -> tuple[list[int], list[int]]:
    """Each block's byte offset (its first record's) and byte length (to the next block's
    first record, or to its shard's end), from the shards' checked offsets files."""
    starts: dict[str, tuple[int, ...]] = {}
    for i in sorted(set(blocks.shard)):
        shard = spans[i].shard
        if shard.filename not in starts:
            starts[shard.filename] = fmt.parse_offsets(read_offsets(info, shard))
    offsets, lengths = [], []
    for s, f, c in zip(blocks.shard, blocks.first, blocks.count, strict=True):
        shard, f = spans[s].shard, spans[s].first + f
        at = starts[shard.filename]
        end = at[f + c] if f + c < len(at) else shard.num_bytes
        offsets.append(at[f])
        lengths.append(end - at[f])
    return offsets, lengths


def read_buffers(info: DatasetInfo, lengths: Sequence[int]) -> list[int]:
    """Each block read's buffer: its byte length up to `READ_BUFFER_BYTES` in an uncompressed
    shard (a block of small records is one read of its own bytes, not of 256 KiB), and
    `READ_BUFFER_BYTES` in a compressed one (where the buffer is the compressed stream's, read
    from the shard's start)."""
    if info.compression_type:
        return [READ_BUFFER_BYTES] * len(lengths)
    return [min(READ_BUFFER_BYTES, max(n, 1)) for n in lengths]


class _WindowReader(_Windows):
    """The block path's window function (`pipeline_records`): a window's records, read by
    blocks."""

    def __init__(
        self,
        info: DatasetInfo,
        spans: Sequence[ShardSpan],
        blocks: Blocks,
        order: GlobalOrder,
        slots: Slots,
        *,
        positions: bool,
    ):
        super().__init__(blocks, order, slots)
        self._positions = positions
        self._compression = info.compression_type
        num = len(blocks)
        # per block, and one more: `EpochOrder.windows`' padding (no shard, no records)
        paths = [span.shard.path for span in spans]
        self._paths = tf.constant(paths + [""], tf.string)  # by span; "" for the padding
        self._shard = tf.constant(list(blocks.shard) + [len(paths)], tf.int64, shape=[num + 1])
        offsets, lengths = block_extents(info, spans, blocks)
        self._offset = tf.constant(offsets + [0], tf.int64, shape=[num + 1])
        buffers = read_buffers(info, lengths) + [READ_BUFFER_BYTES]
        self._buffer = tf.constant(buffers, tf.int64, shape=[num + 1])

    def read(
        self,
        epoch: tf.Tensor,
        window: tf.Tensor,
        blocks: tf.Tensor,
        first: tf.Tensor,
        size: tf.Tensor,
    ) -> tf.Tensor:
        """The window's records this pipeline yields, in the order: ``[n]`` strings (and their
        positions, with `positions`). Only the blocks holding them are read."""
        source, positions, owner, block_first = self._sources(epoch, window, blocks, first, size)
        counts = tf.gather(self._count, blocks)
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
            return tf.gather(records, index), positions
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
