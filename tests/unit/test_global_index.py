"""The global order without TensorFlow (`replay.global_index`) against TensorFlow's own ops: the
SipHash of ``tf.strings.to_hash_bucket_strong``, the ``RandomIndexShuffle`` op (its cycle-walking
and its one-short block on powers of 4, raw and with `replay.global_order`'s fix-up), the key
words of `EpochOrder` and `positions_records` over layouts with empty shards, short blocks and
short windows. Sequences read from datasets: tests/pipeline/test_global_index_reader.py."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from replay.global_index import GlobalIndex, _op_shuffle, index_shuffle, order_key, siphash24
from replay.global_order import (
    EpochOrder,
    GlobalOrder,
    _index_shuffle,
    plan_blocks,
    positions_records,
)

RNG_SEED = 53


def test_siphash_is_tensorflows_strong_hash():
    # tensorflow's own test vector (string_to_hash_bucket_op_test.py): key [98765, 132], "a"
    assert siphash24(98765, 132, b"a") == 7157389809176466784
    rng = np.random.default_rng(RNG_SEED)
    texts = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in range(0, 41)]
    for key in ([0, 0], [7, 0x676C6F62], [2**32 - 1, 5], [2**62 + 3, 2**63 - 1]):
        tf_words = tf.strings.to_hash_bucket_strong(texts, 2**32, key=key).numpy()
        tf_mod = tf.strings.to_hash_bucket_strong(texts, 2**61 - 1, key=key).numpy()
        ours = [siphash24(key[0], key[1], t) for t in texts]
        assert [h % 2**32 for h in ours] == tf_words.tolist(), key
        assert [h % (2**61 - 1) for h in ours] == tf_mod.tolist(), key


def test_keys_are_epoch_orders_words():
    rng = np.random.default_rng(RNG_SEED)
    cases = [(0, 0, 0), (2**32 - 1, 0, 0), (7, 10**12, 3)] + [
        (int(s), int(e), int(k))
        for s, e, k in zip(
            rng.integers(0, 2**32, 40),
            rng.integers(0, 10**6, 40),
            rng.integers(0, 5000, 40),
            strict=True,
        )
    ]
    blocks = plan_blocks([3], block_length=1)
    for seed, epoch, key in cases:
        order = EpochOrder(blocks, seed=seed, window_blocks=1)
        words = order._key(tf.constant(epoch, tf.int64), tf.constant(key, tf.int64)).numpy()
        assert order_key(seed, epoch, key) == tuple(int(w) for w in words), (seed, epoch, key)


# max_index values: the smallest blocks (16 bits), each block size's edges (2**k - 1, 2**k,
# 2**k + 1 for odd and even k), the powers of 4 where TF's op is one value short (4**8 on), and
# values past 32 bits (sampled indices).
MAX_INDEX = [0, 1, 2, 3, 4, 5, 15, 16, 17, 100, 1023, 1024, 1025, 2**15, 2**16 - 1]
MAX_INDEX += [4**8, 4**8 + 1, 2**17 - 1, 2**17, 2**17 + 1, 4**9 - 1, 4**9, 4**9 + 1, 4**10]
MAX_INDEX += [2**21 + 7, 4**16, 2**33 + 5, 4**20, 2**62 - 1]


def _tf_fixed(index: np.ndarray, key, max_index: int) -> np.ndarray:
    return _index_shuffle(tf.constant(index, tf.int64), tf.constant(key, tf.int64), max_index)


@pytest.mark.parametrize("max_index", MAX_INDEX)
def test_index_shuffle_is_tensorflows(max_index):
    """Raw, the op's numbers (a repeated value on powers of 4 included); with the fix-up,
    `replay.global_order._index_shuffle`'s, over many keys."""
    rng = np.random.default_rng([RNG_SEED, max_index % 2**32])
    if max_index < 5000:
        index = np.arange(max_index + 1)
    else:  # the edges and a sample
        index = np.unique(
            np.concatenate(
                [[0, 1, max_index - 1, max_index], rng.integers(0, max_index + 1, 300)]
            ).astype(np.int64)
        )
    keys = [[0, 0, 0], [2**32 - 1] * 3] + rng.integers(0, 2**32, (6, 3)).tolist()
    for key in keys:
        raw = tf.raw_ops.RandomIndexShuffle(
            index=tf.constant(index, tf.int64),
            seed=tf.constant(key, tf.int64),
            max_index=tf.constant(max_index, tf.int64),
            rounds=4,
        ).numpy()
        ours_raw = _op_shuffle(index.astype(np.uint64), key, max_index, 4).astype(np.int64)
        assert np.array_equal(ours_raw, raw), key
        assert np.array_equal(
            index_shuffle(index, key, max_index), _tf_fixed(index, key, max_index)
        )


@pytest.mark.parametrize("n", [4**8 + 1, 4**9 + 1])
def test_the_fix_up_makes_a_permutation_where_the_op_repeats(n):
    key = (11, 22, 33)
    raw = _op_shuffle(np.arange(n, dtype=np.uint64), key, n - 1, 4)
    assert len(np.unique(raw)) == n - 1  # the op alone: one value twice, one never
    fixed = index_shuffle(np.arange(n), key, n - 1)
    assert np.array_equal(np.sort(fixed), np.arange(n))
    assert np.array_equal(fixed, _tf_fixed(np.arange(n), key, n - 1))


# (counts, block_length, window_blocks): empty shards first, inside and last, blocks cut by
# shard ends, a last short window, one record, one block a window, one window an epoch.
LAYOUTS = [
    ((37, 0, 50, 13), 4, 3),
    ((0, 5, 0, 7, 3, 0), 2, 2),
    ((1,), 1, 1024),
    ((9, 8), 1, 1),
    ((10, 11), 3, 100),
    ((300, 17, 250), 1, 64),
]


@pytest.mark.parametrize(("counts", "block_length", "window_blocks"), LAYOUTS)
def test_records_are_positions_records(counts, block_length, window_blocks):
    """Three epochs, in order and shuffled positions, for several seeds: the record index is
    the span's first index + `positions_records`' record."""
    n = sum(counts)
    first = np.cumsum((0, *counts))
    blocks = plan_blocks(counts, block_length=block_length)
    rng = np.random.default_rng(RNG_SEED)
    for seed in (0, 7, 2**32 - 1, int(rng.integers(0, 2**32))):
        positions = list(range(3 * n))
        where = positions_records(blocks, positions, seed=seed, window_blocks=window_blocks)
        expected = [int(first[s]) + r for s, r in where]
        index = GlobalIndex(
            counts, seed=seed, block_length=block_length, window_blocks=window_blocks
        )
        assert index.records(positions).tolist() == expected, seed
        shuffled = rng.permutation(3 * n)
        assert index.records(shuffled).tolist() == [expected[p] for p in shuffled]
        for e in range(3):  # each epoch a permutation of the records
            assert sorted(expected[e * n : (e + 1) * n]) == list(range(n))


def test_far_epochs_and_shapes():
    counts = (5, 0, 7, 3)
    index = GlobalIndex(counts, seed=9, block_length=2, window_blocks=2)
    far = [10**9 * 15 + p for p in (0, 4, 14)]
    where = positions_records(plan_blocks(counts, block_length=2), far, seed=9, window_blocks=2)
    first = np.cumsum((0, *counts))
    assert index.records(far).tolist() == [int(first[s]) + r for s, r in where]
    assert index.records(np.arange(6).reshape(2, 3)).shape == (2, 3)
    assert index.records([]).shape == (0,)
    with pytest.raises(ValueError, match=">= 0"):
        index.records([-1])
    with pytest.raises(ValueError, match="no records"):
        GlobalIndex((0, 0), seed=1).records([0])


def test_pickles_and_imports_without_tensorflow():
    index = GlobalIndex((37, 0, 50, 13), seed=7, block_length=4, window_blocks=3)
    before = index.records(range(250)).tolist()
    assert pickle.loads(pickle.dumps(index)).records(range(250)).tolist() == before
    code = (
        "import sys, replay.global_index as g; "
        "assert g.GlobalIndex((3, 4), seed=1).records(range(14)).size == 14; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_blocks_of_one_record_depend_on_the_record_count_alone():
    """So a source without spans (any ``len``) gets the order of the records it holds."""
    spans = GlobalIndex((37, 0, 50, 13), seed=3, window_blocks=7)
    assert np.array_equal(
        spans.records(range(300)), GlobalIndex((100,), seed=3, window_blocks=7).records(range(300))
    )
    order = GlobalOrder(seed=3, window_blocks=7)
    assert np.array_equal(
        GlobalIndex.of(range(100), order).records(range(300)), spans.records(range(300))
    )
    with pytest.raises(TypeError, match="no `spans`"):
        GlobalIndex.of(range(100), GlobalOrder(seed=3, block_length=2))
