"""Tests of the order `replay_dataset` reads in: `reader_func`, the default reader's blocks and
interleave, shuffles and seeds, and `input_context` shares, on the hand-made datasets `single`
and `splits` (tests/pipeline/conftest.py); `ReadConfig`: test_read_config.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import replay
from replay import load_info, replay_dataset
from tests.support.replay_elements import all_indices, collect, indices


def _shard_after_shard(datasets):  # a reader_func
    return datasets.flat_map(lambda shard: shard)


# --- reader_func -----------------------------------------------------------------------------


def test_reader_func_gets_dataset_of_shard_datasets(splits):
    path, expected = splits
    calls = []

    def reader_func(datasets):
        calls.append(datasets)
        return datasets.flat_map(lambda shard: shard)  # shard after shard, file order

    ds = replay_dataset(path, split="train", reader_func=reader_func, seed=0)
    assert len(calls) == 1
    datasets = calls[0]
    assert isinstance(datasets, tf.data.Dataset)
    assert isinstance(datasets.element_spec, tf.data.DatasetSpec)
    assert datasets.element_spec.element_spec == load_info(path).element_spec
    assert int(datasets.cardinality()) == 4  # one per shard file
    assert indices(collect(ds)) == all_indices(expected, ["train"])  # manifest order


def test_shuffling_reader_func_changes_order_not_content(splits):
    path, expected = splits

    def reader_func(datasets):  # the snapshot docs' example: shuffle shards, then interleave
        datasets = datasets.shuffle(100, seed=5)
        return datasets.interleave(
            lambda shard: shard, cycle_length=2, num_parallel_calls=2, deterministic=True
        )

    got = indices(collect(replay_dataset(path, reader_func=reader_func, seed=1)))
    assert got != all_indices(expected)
    assert sorted(got) == sorted(all_indices(expected))


def test_reader_func_must_return_elements(single):
    path, _ = single
    with pytest.raises(TypeError, match="reader_func"):
        replay_dataset(path, reader_func=lambda datasets: datasets)


def _train_shards(expected: dict) -> list[list[int]]:
    shards, start = [], 0
    for count in (5, 7, 3, 6):
        shards.append(all_indices(expected, ["train"])[start : start + count])
        start += count
    return shards


def test_default_reader_interleaves_blocks_without_shuffling(splits):
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", cycle_length=4, block_length=2, deterministic=True)
    got = indices(collect(ds))
    assert got[:8] == [i for s in shards for i in s[:2]]  # 2 records of each shard in turn
    for shard in shards:  # each shard's own order is kept
        assert [i for i in got if i in shard] == shard
    # Default block_length: 64 records, more than a shard holds here: shard after shard.
    batches = collect(replay_dataset(path, split="train", batch_size=4, deterministic=True))
    assert [len(b["index"]) for b in batches] == [4] * 5 + [1]  # rebatched across shards
    assert np.concatenate([b["index"] for b in batches]).tolist() == [i for s in shards for i in s]


def test_with_a_small_shuffle_buffer_the_default_block_is_one_record(splits):
    """A shard holds its windows in file order: blocks would fill a small shuffle buffer with
    neighbouring windows of one file, so with a buffer under 128 the shards take turns record
    by record (a buffer of 1 keeps the order it is given)."""
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", cycle_length=4, shuffle_buffer=1, deterministic=True)
    got = indices(collect(ds))
    assert got[:4] == [s[0] for s in shards] and got[4:8] == [s[1] for s in shards]
    assert sorted(got) == sorted(i for s in shards for i in s)


def test_shuffle_block_length_keeps_64_blocks_in_the_buffer():
    from replay.default_reader import shuffle_block_length

    buffers = (1, 64, 127, 128, 1000, 4095, 4096, 10_000, 10**6)
    assert [shuffle_block_length(b) for b in buffers] == [1, 1, 1, 2, 15, 63, 64, 64, 64]


def test_with_a_shuffle_buffer_the_default_block_follows_the_buffer(splits):
    """A buffer of 256 reads blocks of 4 records (shuffle_block_length): the seeded order is
    that of block_length=4, not that of one record at a time (the default before issue 28)."""
    path, expected = splits

    def order(**kw):
        ds = replay_dataset(path, split="train", shuffle_buffer=256, seed=5, cycle_length=4, **kw)
        return indices(collect(ds))

    assert order() == order(block_length=4)
    assert order() != order(block_length=1)
    assert sorted(order()) == sorted(all_indices(expected, ["train"]))


@pytest.mark.parametrize("kw", [{}, {"block_length": 2}, {"shuffle_buffer": 8, "seed": 1}])
def test_default_reading_keeps_the_deterministic_parallel_interleaves_order(splits, kw):
    """Default num_parallel_reads: each shard reads ahead in a thread of its own and a plain
    interleave takes its blocks in turn: the order of tf.data's parallel interleave with
    deterministic=True (an explicit num_parallel_reads)."""
    path, _ = splits
    ahead = replay_dataset(path, cycle_length=3, deterministic=True, **kw)
    parallel = replay_dataset(path, cycle_length=3, deterministic=True, num_parallel_reads=2, **kw)
    assert indices(collect(ahead)) == indices(collect(parallel))


def test_returned_datasets_leave_autotune_off_and_it_can_be_turned_on(splits):
    """Autotune's optimisation thread made deleting an iterator take 0.25-0.3 s in half the
    epochs (replay.reader, "Autotune"): every dataset replay returns has it off, as an option
    of that dataset, which the caller can turn back on."""
    path, _ = splits
    made = [
        replay_dataset(path),
        replay_dataset(path, shuffle_buffer=8, batch_size=2),
        replay_dataset(path, reader_func=replay.default_reader_func),
        replay_dataset(path, split="train", balance="class", seed=0),
    ]
    assert [ds.options().autotune.enabled for ds in made] == [False] * 4
    on = tf.data.Options()
    on.autotune.enabled = True
    assert made[0].with_options(on).options().autotune.enabled is True
    assert tf.data.Dataset.range(3).options().autotune.enabled is not False  # not process-wide


def test_seed_order_is_whole_blocks_in_shuffled_shard_order(splits):
    path, expected = splits
    shards = _train_shards(expected)
    ds = replay_dataset(path, split="train", shuffle_shards=True, seed=3, batch_size=5)
    got = np.concatenate([b["index"] for b in collect(ds)]).tolist()
    assert got == indices(collect(replay_dataset(path, split="train", shuffle_shards=True, seed=3)))
    order = sorted(shards, key=lambda s: got.index(s[0]))
    assert got == [i for s in order for i in s]  # blocks of 64 > any shard: whole shards


# --- order and seeds -------------------------------------------------------------------------


def test_seed_makes_order_reproducible(splits):
    path, expected = splits

    def build(**kw):
        return replay_dataset(path, shuffle_shards=True, shuffle_buffer=8, seed=7, **kw)

    a, b = build(), build()
    a1, a2 = indices(collect(a)), indices(collect(a))
    assert a1 == indices(collect(b)) and a2 == indices(collect(b))
    assert a1 != a2  # reshuffled each iteration
    assert sorted(a1) == sorted(all_indices(expected))
    assert a.options().deterministic is True
    fixed = build(reshuffle_each_iteration=False)
    assert indices(collect(fixed)) == indices(collect(fixed))


def test_no_seed_means_nondeterministic_order(single):
    path, _ = single
    assert replay_dataset(path).options().deterministic is False
    assert replay_dataset(path, deterministic=True).options().deterministic is True


# --- input_context ---------------------------------------------------------------------------


@pytest.mark.parametrize("num_pipelines", [1, 2, 3, 7])
@pytest.mark.parametrize("shuffle_shards", [False, True])
def test_input_context_shares_are_disjoint_and_complete(splits, num_pipelines, shuffle_shards):
    path, expected = splits  # 4 train shards: 7 pipelines fall back to element sharding
    seen = []
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(
            num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id
        )
        ds = replay_dataset(
            path, split="train", input_context=context, shuffle_shards=shuffle_shards
        )
        share = indices(collect(ds))
        assert int(ds.cardinality()) == len(share)
        seen.extend(share)
    assert sorted(seen) == sorted(all_indices(expected, ["train"]))


BIG_SHARDS = (150, 200)  # several read blocks (replay.shards.PARSE_BATCH: 64), not multiples


@pytest.fixture(scope="module")
def big_shards(tmp_path_factory):
    """Two shards of `BIG_SHARDS` records: their blocks of 64 cut through every share."""
    from tests.support.replay_fixtures import write_dataset

    path = str(tmp_path_factory.mktemp("big_shards"))
    return path, write_dataset(path, num_examples_per_shard=BIG_SHARDS, win_len=16)


@pytest.mark.parametrize("num_pipelines", [2, 3, 4, 5])
@pytest.mark.parametrize("reading", ["default", "block_length_5", "reader_func"])
def test_input_context_shares_are_the_documented_records_across_blocks(
    big_shards, num_pipelines, reading
):
    """Each pipeline's share is exactly its shard files ``id::n`` (as many files as pipelines or
    more), else records ``id::n`` of every shard (element sharding): counted across read blocks,
    so a share is the same whichever block a record falls in; with the cardinality it says."""
    path, expected = big_shards
    reading = {
        "default": {},  # blocks of 64 serialized records
        "block_length_5": {"block_length": 5},
        "reader_func": {"reader_func": _shard_after_shard},  # decoded per PARSE_BATCH records
    }[reading]
    records = all_indices(expected)
    shards = [records[:150], records[150:]]
    seen = []
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(
            num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id
        )
        ds = replay_dataset(path, input_context=context, deterministic=True, **reading)
        share = indices(collect(ds))
        if num_pipelines <= len(shards):  # file sharding
            want = [i for shard in shards[pipeline_id::num_pipelines] for i in shard]
        else:
            want = [i for shard in shards for i in shard[pipeline_id::num_pipelines]]
        assert sorted(share) == sorted(want), (pipeline_id, num_pipelines)
        assert int(ds.cardinality()) == len(want)
        seen.extend(share)
    assert sorted(seen) == sorted(records)
