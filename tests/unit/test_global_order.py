"""The global read order's pure parts (`replay.global_order`): blocks, pipelines' positions, the
permutation op and its keys. Sequences read from datasets: tests/pipeline/test_global_reader.py."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from replay.global_order import GlobalOrder, Slots, _index_shuffle, plan_blocks


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
