"""The global read order's pure parts (`replay.global_order`): blocks, pipelines' positions, the
permutation op and its keys. Sequences read from datasets: tests/pipeline/test_global_reader.py.

The order's definition (the module docstring: blocks in the order of ``index_shuffle`` keyed by
(seed, epoch, 0), window w's records keyed by (seed, epoch, w + 1), each key 3 SipHash words)
is checked against a reference written here from that text alone, calling TensorFlow's hash and
permutation ops directly, and against literal sequences it computed once: a change in how the
order is defined shows even where the reader and `positions_records` change together."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from replay.global_order import (
    EpochOrder,
    GlobalOrder,
    Slots,
    _index_shuffle,
    plan_blocks,
    positions_records,
)

# The reference order (module docstring), for layouts far below 4**8 records a window (where
# TF's op alone is a permutation): the key of (seed, epoch, k) is 3 words, the SipHash of
# "<salt>epoch:k" keyed by (seed, "glob"); the op runs 4 rounds.
_SALTS = ("audiorecords-0", "audiorecords-1", "audiorecords-2")
_SIPHASH_KEY2 = 0x676C6F62  # "glob"


def _reference_key(seed: int, epoch: int, k: int) -> list[int]:
    return [
        int(
            tf.strings.to_hash_bucket_strong(f"{salt}{epoch}:{k}", 2**32, key=[seed, _SIPHASH_KEY2])
        )
        for salt in _SALTS
    ]


def _reference_permutation(n: int, key: list[int]) -> list[int]:
    """Where position i of n takes its element from: TF's op, called directly."""
    places = tf.raw_ops.RandomIndexShuffle(
        index=tf.range(n, dtype=tf.int64),
        seed=tf.constant(key, tf.int64),
        max_index=tf.constant(n - 1, tf.int64),
        rounds=4,
    )
    return [int(i) for i in places.numpy()]


def _reference_records(
    counts, positions, *, seed: int, block_length: int, window_blocks: int
) -> list[int]:
    """Each position's record, numbered across the shards in order (shard 0's first, ...)."""
    first = np.cumsum((0, *counts))
    blocks = [  # (first record, count), shard by shard
        (int(first[s]) + f, min(block_length, n - f))
        for s, n in enumerate(counts)
        for f in range(0, n, block_length)
    ]
    total = sum(counts)
    out = []
    for position in positions:
        epoch, q = divmod(position, total)
        block_key = _reference_key(seed, epoch, 0)
        order = [blocks[i] for i in _reference_permutation(len(blocks), block_key)]
        windows = [order[i : i + window_blocks] for i in range(0, len(order), window_blocks)]
        for w, window in enumerate(windows):
            records = [r for start, count in window for r in range(start, start + count)]
            if q < len(records):
                window_key = _reference_key(seed, epoch, w + 1)
                out.append(records[_reference_permutation(len(records), window_key)[q]])
                break
            q -= len(records)
    return out


# (seed, epoch, k) -> the key's 3 words, computed once by `_reference_key`.
KEY_WORDS = {
    (7, 0, 0): [756359324, 2946882553, 3303366216],
    (7, 0, 1): [461025501, 1222766600, 3102768925],
    (7, 1, 0): [1761421295, 1436039999, 949426582],
    (7, 1, 4): [4056874760, 3689004721, 2793105042],
    (0, 0, 1): [3734373079, 764673393, 139429203],
    (2**32 - 1, 1, 2): [4248459721, 1407442213, 81288237],
}
# Shards of 5, 0, 7 and 3 records in blocks of 2, windows of 2 blocks (15 records, 8 blocks, 4
# windows): (seed, positions) -> each position's record (shard 0's 0-4, shard 2's 5-11, shard
# 3's 12-14), computed once by `_reference_records`.
LAYOUT = {"counts": (5, 0, 7, 3), "block_length": 2, "window_blocks": 2}
SEQUENCES = {
    (7, range(30)): [6, 5, 11, 14, 0, 1, 12, 13, 4, 2, 9, 10, 3, 8, 7]
    + [4, 1, 0, 6, 5, 14, 9, 10, 11, 8, 13, 12, 7, 3, 2],
    (0, range(15)): [7, 8, 2, 3, 13, 12, 5, 6, 4, 11, 14, 1, 0, 10, 9],
    (2**32 - 1, range(15, 30)): [1, 2, 0, 3, 7, 10, 8, 9, 14, 12, 13, 5, 6, 4, 11],
}


def _permutation(n: int, key=(1, 2, 3)) -> np.ndarray:
    return _index_shuffle(tf.range(n, dtype=tf.int64), tf.constant(key, tf.int64), n - 1).numpy()


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 4**8, 4**8 + 1, 4**8 + 2, 4**9 + 1])
def test_index_shuffle_is_a_permutation_at_every_size(n):
    """TF's op alone repeats a value at max_index 4**8, 4**9, ... (n = 4**m + 1)."""
    places = _permutation(n)
    assert np.array_equal(np.sort(places), np.arange(n))
    if n > 3:
        assert not np.array_equal(places, np.arange(n))


def test_index_shuffle_depends_on_every_key_word_and_is_stable():
    base = _permutation(500)
    assert np.array_equal(base, _permutation(500))  # a pure function of its inputs
    for key in ((2, 2, 3), (1, 3, 3), (1, 2, 4)):
        assert not np.array_equal(base, _permutation(500, key))


def test_a_seed_is_a_32_bit_word():
    GlobalOrder(seed=2**32 - 1)
    with pytest.raises(ValueError, match="below 2\\*\\*32"):
        GlobalOrder(seed=2**32)  # the op reads the low 32 bits: 2**32 would be seed 0


def test_blocks_cut_each_shard_alone():
    blocks = plan_blocks([5, 0, 3], block_length=2)
    assert (blocks.shard, blocks.first, blocks.count) == (
        (0, 0, 0, 2, 2),
        (0, 2, 4, 0, 2),
        (2, 2, 1, 2, 1),
    )
    assert len(blocks) == 5 and blocks.num_records == 8


def test_slots_count_a_pipelines_positions():
    slots = Slots(global_batch_size=8, num_pipelines=4, pipeline=1)  # positions 2, 3 of each 8
    for end in range(40):
        assert slots.below(end) == sum(1 for p in range(end) if p % 8 in (2, 3)), end
    with pytest.raises(ValueError, match="not divisible"):
        Slots(global_batch_size=6, num_pipelines=4, pipeline=0)


def test_the_keys_are_the_documented_siphash_words():
    blocks = plan_blocks([3], block_length=1)
    for (seed, epoch, k), words in KEY_WORDS.items():
        order = EpochOrder(blocks, seed=seed, window_blocks=1)
        key = order._key(tf.constant(epoch, tf.int64), tf.constant(k, tf.int64))
        assert [int(w) for w in key.numpy()] == _reference_key(seed, epoch, k) == words


@pytest.mark.parametrize(("seed", "positions"), list(SEQUENCES), ids=["seed7", "seed0", "seed_max"])
def test_the_order_is_the_documented_definition(seed, positions):
    """`positions_records` (the function the reader's tests compare with) is the reference of
    the module docstring, and both the literal sequence: blocks keyed by (seed, epoch, 0), window
    w's records by (seed, epoch, w + 1), over two epochs and every window."""
    counts = LAYOUT["counts"]
    first = np.cumsum((0, *counts))
    blocks = plan_blocks(counts, block_length=LAYOUT["block_length"])
    got = positions_records(blocks, positions, seed=seed, window_blocks=LAYOUT["window_blocks"])
    records = [int(first[s]) + r for s, r in got]
    reference = _reference_records(
        counts,
        positions,
        seed=seed,
        block_length=LAYOUT["block_length"],
        window_blocks=LAYOUT["window_blocks"],
    )
    assert records == reference == SEQUENCES[seed, positions]
