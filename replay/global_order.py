"""The global read order: element `P` of a run is fixed by the seed and `P` alone.

A run reads the chosen splits' N records epoch after epoch; its elements are numbered across
workers and epochs, P = 0, 1, ... (epoch ``P // N``). Each epoch is a permutation of the N
records, built in two levels from the shards' record offsets (format version 4,
`replay.offsets`):

1. *Blocks*: each shard is cut into blocks of `block_length` consecutive records (its last block
   shorter), in manifest order (`plan_blocks`). An epoch takes the blocks in the order of
   ``tf.random.experimental.index_shuffle`` keyed by (seed, epoch, 0): a stateless bijection,
   the same on every machine and in every process.
2. *Windows*: consecutive runs of `window_blocks` blocks of that order. The records of window w
   are taken in the order of ``index_shuffle`` keyed by (seed, epoch, w + 1).

The op's key is three 32-bit words, each a SipHash (``tf.strings.to_hash_bucket_strong``, keyed
by the seed) of "epoch:key": keyed directly by small integers, its cipher's few rounds left
seed 0's first block order visibly close to the recorded one.

With W input pipelines and a global batch of G elements, pipeline w yields positions
``[w * G / W, (w + 1) * G / W)`` of every global batch (`Slots`), so the global batches, merged
by position, are the same for every W. How the records are read (`replay.global_reader`): by
record id through the random-access layer (`replay.records`), each pipeline only the records of
its own positions at or after `start`; with GZIP / ZLIB shards or under the tf.data service,
by blocks, each a read from its first record's byte offset.

`positions_records` is the order itself as a function (positions -> (shard, record)), for
tests and for tools that need to know where an element came from without reading it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

# Defaults chosen on shuffle quality against a permutation (docs/training.md): blocks of one
# record in windows of 1,024 match a permutation on all four measures; records are read by id
# (`replay.global_reader`), so a block no longer sets the size of a read there.
BLOCK_LENGTH = 1  # records a block: consecutive records of a shard that stay together
WINDOW_BLOCKS = 1024  # blocks a window: the records shuffled together
_KEY_SALTS = (b"audiorecords-0", b"audiorecords-1", b"audiorecords-2")  # the 3 key words
_BLOCK_KEY = 0  # index_shuffle key (seed, epoch, 0): the epoch's block order; windows w + 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlobalOrder:
    """`replay_dataset(..., order=GlobalOrder(...))`: the global read order (module docstring).

    Attributes:
      seed: the order's seed (an integer in [0, 2**32)): the same seed, the same order.
      start: the position of the first element of this run, counted over every worker and
        every epoch (element `start` of an uninterrupted run): the one number a trainer saves
        to resume. A multiple of `global_batch_size` when that is given.
      global_batch_size: elements a global batch takes from all input pipelines together; each
        pipeline yields its ``global_batch_size / num_input_pipelines`` positions of each (None:
        one element per pipeline, round robin).
      block_length: consecutive records of a shard kept together (1: each record placed on
        its own; the block path reads a block at a time).
      window_blocks: blocks a window (the records shuffled together).
    """

    seed: int
    start: int = 0
    global_batch_size: int | None = None
    block_length: int = BLOCK_LENGTH
    window_blocks: int = WINDOW_BLOCKS

    def __post_init__(self) -> None:
        for name in ("seed", "start", "block_length", "window_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"GlobalOrder: {name} must be an integer >= 0, not {value!r}")
        if self.seed >= 1 << 32:  # index_shuffle keys are 32-bit words
            raise ValueError(f"GlobalOrder: seed must be below 2**32, not {self.seed}")
        if self.block_length < 1 or self.window_blocks < 1:
            raise ValueError("GlobalOrder: block_length and window_blocks must be >= 1")
        g = self.global_batch_size
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
            raise ValueError(f"GlobalOrder: global_batch_size must be an integer >= 1, not {g!r}")
        if g is not None and self.start % g:
            raise ValueError(
                f"GlobalOrder: start {self.start} is not a multiple of global_batch_size {g} "
                "(a run resumes at a global batch's first element)"
            )


@dataclasses.dataclass(frozen=True)
class Slots:
    """The positions one input pipeline yields: in each global batch of `global_batch_size`,
    the `global_batch_size // num_pipelines` positions from ``pipeline * that``."""

    global_batch_size: int
    num_pipelines: int
    pipeline: int

    def __post_init__(self) -> None:
        if self.global_batch_size % self.num_pipelines:
            raise ValueError(
                f"GlobalOrder: global_batch_size {self.global_batch_size} is not divisible by "
                f"the {self.num_pipelines} input pipelines"
            )

    @property
    def per_pipeline(self) -> int:
        return self.global_batch_size // self.num_pipelines

    def below(self, position: int) -> int:
        """How many of this pipeline's positions are below `position`."""
        batches, rest = divmod(position, self.global_batch_size)
        first = self.pipeline * self.per_pipeline
        return batches * self.per_pipeline + min(max(rest - first, 0), self.per_pipeline)


@dataclasses.dataclass(frozen=True)
class Blocks:
    """The blocks of a sequence of shards (`plan_blocks`), each a run of one shard's records.

    Attributes:
      shard: each block's shard (its index in the sequence).
      first: each block's first record, counted in its shard.
      count: each block's records.
    """

    shard: tuple[int, ...]
    first: tuple[int, ...]
    count: tuple[int, ...]

    @property
    def num_records(self) -> int:
        return sum(self.count)

    def __len__(self) -> int:
        return len(self.count)


def plan_blocks(counts: Sequence[int], *, block_length: int) -> Blocks:
    """Cuts shards of `counts` records into blocks of `block_length` (each shard's last one
    shorter; an empty shard has none), in shard order."""
    if block_length < 1:
        raise ValueError(f"block_length must be >= 1, not {block_length}")
    shard, first, count = [], [], []
    for i, n in enumerate(counts):
        for start in range(0, n, block_length):
            shard.append(i)
            first.append(start)
            count.append(min(block_length, n - start))
    return Blocks(tuple(shard), tuple(first), tuple(count))


class EpochOrder:
    """The order's arithmetic in TensorFlow, for blocks `blocks` (module docstring).

    Every method is a pure function of its arguments and the constructor's: graph code, used
    inside tf.data functions.
    """

    def __init__(self, blocks: Blocks, *, seed: int, window_blocks: int):
        import tensorflow as tf

        self.num_blocks = len(blocks)
        self.num_records = blocks.num_records
        self.window_blocks = window_blocks
        self.num_windows = -(-self.num_blocks // window_blocks)
        self.seed = seed
        self._count = tf.constant(blocks.count, tf.int64, shape=[self.num_blocks])

    def _key(self, epoch: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
        """index_shuffle's key of (seed, epoch, key): 3 SipHash words (module docstring)."""
        import tensorflow as tf

        text = tf.strings.join(
            [
                tf.strings.as_string(tf.cast(epoch, tf.int64)),
                tf.strings.as_string(tf.cast(key, tf.int64)),
            ],
            separator=":",
        )
        words = [
            tf.strings.to_hash_bucket_strong(
                tf.strings.join([salt, text]), 1 << 32, key=[self.seed, 0x676C6F62]
            )
            for salt in _KEY_SALTS
        ]
        return tf.stack(words)

    def block_order(self, epoch: tf.Tensor) -> tf.Tensor:
        """The epoch's blocks in read order, ``[num_blocks]`` int64."""
        import tensorflow as tf

        index = tf.range(self.num_blocks, dtype=tf.int64)
        return _index_shuffle(index, self._key(epoch, _BLOCK_KEY), self.num_blocks - 1)

    def windows(self, epoch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The epoch's windows: (blocks ``[num_windows, window_blocks]``, the last window padded
        with `num_blocks`, a block of no records; first records ``[num_windows]``, counted in the
        epoch; sizes ``[num_windows]``)."""
        import tensorflow as tf

        order = self.block_order(epoch)
        pad = self.num_windows * self.window_blocks - self.num_blocks
        padded = tf.concat([order, tf.fill([pad], tf.constant(self.num_blocks, tf.int64))], 0)
        blocks = tf.reshape(padded, [self.num_windows, self.window_blocks])
        padded_count = tf.concat([self._count, tf.zeros([1], tf.int64)], 0)  # the padding: 0
        counts = tf.gather(padded_count, blocks)
        sizes = tf.reduce_sum(counts, axis=1)
        return blocks, tf.cumsum(sizes, exclusive=True), sizes

    def window_permutation(self, epoch: tf.Tensor, window: tf.Tensor, size: tf.Tensor):
        """Where each position of a window of `size` records takes its record from, ``[size]``."""
        import tensorflow as tf

        index = tf.range(size, dtype=tf.int64)
        return _index_shuffle(index, self._key(epoch, window + 1), tf.maximum(size - 1, 0))


def _index_shuffle(index: tf.Tensor, key: tf.Tensor, max_index: tf.Tensor | int) -> tf.Tensor:
    """`index`'s places in a permutation of [0, max_index] keyed by `key` (3 integers, of which
    the op reads the low 32 bits each): ``tf.random.experimental.index_shuffle``'s op (the public
    function takes 2 words and pads the op's third).

    The op is not a bijection when `max_index` is a power of 4 from 4**8 on (one value twice,
    one never: its cipher's block is one bit short; TF 2.21). There it permutes [0, max_index + 1]
    and the index that lands on max_index + 1 takes max_index + 1's place instead: a
    permutation of [0, max_index] again.
    """
    import tensorflow as tf

    index = tf.convert_to_tensor(index, tf.int64)
    top = tf.cast(max_index, tf.int64)  # a scalar: the op broadcasts it
    odd_bits = tf.constant(0x5555555555555555, tf.int64)
    power_of_4 = tf.logical_and(
        tf.equal(tf.bitwise.bitwise_and(top, top - 1), 0),
        tf.not_equal(tf.bitwise.bitwise_and(top, odd_bits), 0),
    )
    broken = tf.logical_and(power_of_4, top >= 4**8)
    top = tf.where(broken, top + 1, top)

    def shuffle(i: tf.Tensor) -> tf.Tensor:
        return tf.raw_ops.RandomIndexShuffle(index=i, seed=key, max_index=top, rounds=4)

    places = shuffle(index)  # (the op costs ~1 us an index: max_index + 1's place is one call)
    return tf.where(tf.logical_and(broken, tf.equal(places, top)), shuffle(top), places)


def positions_records(
    blocks: Blocks, positions: Sequence[int], *, seed: int, window_blocks: int
) -> list[tuple[int, int]]:
    """(shard, record in shard) of each of the run's `positions` in the order (module
    docstring): the order as a plain function, computed with the reader's own ops."""
    import tensorflow as tf

    order = EpochOrder(blocks, seed=seed, window_blocks=window_blocks)
    n = order.num_records
    out = []
    epochs: dict[int, tuple] = {}  # epoch -> its windows
    perms: dict[tuple[int, int], object] = {}  # (epoch, window) -> its permutation
    for position in positions:
        epoch, q = divmod(position, n)
        if epoch not in epochs:
            epochs[epoch] = tuple(t.numpy() for t in order.windows(tf.constant(epoch, tf.int64)))
        window_blocks_, starts, sizes = epochs[epoch]
        w = int((starts <= q).sum()) - 1
        if (epoch, w) not in perms:
            perms[epoch, w] = order.window_permutation(
                tf.constant(epoch, tf.int64), tf.constant(w, tf.int64), tf.constant(int(sizes[w]))
            ).numpy()
        r = int(perms[epoch, w][q - int(starts[w])])
        for block in window_blocks_[w]:
            if block >= len(blocks):  # the padding
                break
            if r < blocks.count[block]:
                out.append((blocks.shard[block], blocks.first[block] + r))
                break
            r -= blocks.count[block]
    return out
