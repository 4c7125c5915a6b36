"""`replay_dataset(..., order=GlobalOrder(...))`: the global read order (`replay.global_order`,
`replay.global_reader`) on hand-made datasets of format version 4 (`write_dataset`: the record
offsets counted by the fixture from the records' lengths). Sequences are compared in order,
never as sets: element P of a run is fixed by the seed and P, whatever the number of input
pipelines and wherever a run starts.
"""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import tensorflow as tf

import replay
from replay import NoOffsetsError, replay_dataset
from replay import format as fmt
from replay.global_order import GlobalOrder, Slots, plan_blocks, positions_records
from replay.global_reader import pipeline_batches
from replay.records import FRAME_BYTES, Records
from replay.slicing import read_spans
from tests.support.replay_elements import all_indices, collect, indices
from tests.support.replay_fixtures import write_dataset, write_manifest

# Shards of 37, 0, 50 and 13 records: an empty shard, shard ends inside blocks of 4 and windows
# of 3 blocks (100 records, 27 blocks, 9 windows, the last short).
COUNTS = (37, 0, 50, 13)
SMALL = {"block_length": 4, "window_blocks": 3}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("global")
    expected = write_dataset(path, num_examples_per_shard=COUNTS, compression="NONE", seed=4)
    return str(path), expected


def _run(path: str, *, take: int | None = None, context=None, **order) -> list[int]:
    """The indices a run of `GlobalOrder(**order)` yields (`take` of them, repeated)."""
    ds = replay_dataset(
        path,
        order=GlobalOrder(**{**SMALL, **order}),
        features=[fmt.INDEX_KEY],
        repeat=take is not None,
        input_context=context,
    )
    return indices(collect(ds.take(take) if take is not None else ds))


@pytest.fixture(scope="module")
def seed_7(dataset) -> tuple[int, ...]:
    """The first 400 indices (4 epochs) of the run with seed 7 from position 0, read once per
    module: the whole run the tests of runs cut at some position compare with."""
    path, _ = dataset
    return tuple(_run(path, take=400, seed=7))


def _context(num: int, index: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=num, input_pipeline_id=index)


def _merged(path: str, *, workers: int, batch: int, start: int, batches: int) -> list[int]:
    """The global batches `batches` from `start` of `workers` pipelines, merged by position."""
    per = batch // workers
    runs = [
        _run(
            path,
            take=batches * per,
            context=_context(workers, w),
            seed=7,
            start=start,
            global_batch_size=batch,
        )
        for w in range(workers)
    ]
    return [i for b in range(batches) for run in runs for i in run[b * per : (b + 1) * per]]


def test_each_epoch_is_a_permutation_of_its_own(dataset):
    path, expected = dataset
    stored = all_indices(expected)
    n = len(stored)
    run = _run(path, take=3 * n, seed=7)
    epochs = [run[e * n : (e + 1) * n] for e in range(3)]
    assert all(sorted(epoch) == sorted(stored) for epoch in epochs)  # each window once an epoch
    assert len({tuple(epoch) for epoch in epochs} | {tuple(stored)}) == 4  # all different
    assert _run(path, take=3 * n, seed=7) == run  # the seed fixes the order
    assert _run(path, take=n, seed=8) != run[:n]


# Records of the run of seed 7 (SMALL) on COUNTS, numbered across the shards (shard 0's 0-36,
# shard 2's 37-86, shard 3's 87-99): positions 0-23 and 100-111 (epoch 1), computed once by the
# reference order of tests/unit/test_global_order.py (the module docstring's definition).
SEED_7 = {
    0: [
        75,
        74,
        44,
        27,
        42,
        41,
        43,
        73,
        26,
        25,
        76,
        24,
        10,
        11,
        9,
        88,
        89,
        90,
        87,
        8,
        36,
        39,
        97,
        40,
    ],
    100: [49, 32, 52, 0, 2, 3, 35, 33, 51, 34, 1, 50],
}


@pytest.mark.parametrize("start", sorted(SEED_7))
def test_the_reader_yields_the_frozen_sequence(dataset, start):
    """Literal sequences, so a change in how the order is defined shows even where the reader
    and `positions_records` change together."""
    path, expected = dataset
    stored = all_indices(expected)
    records = SEED_7[start]
    assert _run(path, take=len(records), seed=7, start=start) == [stored[r] for r in records]


def test_the_order_is_the_documented_function_of_seed_and_position(dataset):
    """What the reader yields is `positions_records`: blocks of 4 records of a shard, the blocks
    permuted per epoch, records permuted inside windows of 3 consecutive blocks of that order."""
    path, expected = dataset
    stored = all_indices(expected)
    n = len(stored)
    blocks = plan_blocks(COUNTS, block_length=4)
    first = np.cumsum((0, *COUNTS))
    where = positions_records(blocks, range(2 * n), seed=7, window_blocks=3)
    assert _run(path, take=2 * n, seed=7) == [stored[first[s] + r] for s, r in where]
    # a window holds the records of its 3 blocks: 12 positions from at most 3 runs of 4
    window = sorted(where[:12])
    runs = {(s, r // 4) for s, r in window}
    assert len(runs) == 3 and all(
        sum(1 for w in window if (w[0], w[1] // 4) == b) == 4 for b in runs
    )


@pytest.mark.parametrize("start", [1, 5, 11, 12, 13, 99, 100, 101, 157, 200, 299])
def test_a_run_started_at_any_position_is_the_rest_of_the_run(dataset, seed_7, start):
    """Mid-block, mid-window, at and across epoch boundaries (N = 100)."""
    path, _ = dataset
    full = list(seed_7)
    assert _run(path, take=400 - start, seed=7, start=start) == full[start:]
    epoch_end = (start // 100 + 1) * 100  # without repeat: to the end of start's epoch
    assert _run(path, seed=7, start=start) == full[start:epoch_end]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_any_worker_count_gives_the_same_global_batches(dataset, workers):
    path, _ = dataset
    full = _run(path, take=240, seed=7)
    assert _merged(path, workers=workers, batch=8, start=0, batches=30) == full


@pytest.mark.slow  # per case 3 cuts, each read by up to 4 + 4 pipelines
@pytest.mark.parametrize(("killed", "resumed"), [(a, b) for a in (1, 2, 4) for b in (1, 2, 4)])
def test_a_run_killed_with_some_workers_resumes_with_others(dataset, seed_7, killed, resumed):
    """Stopped at a random global batch (mid-window, mid-epoch) with `killed` pipelines, resumed
    there with `resumed` ones; and once more across the epoch boundary (N = 100, G = 4)."""
    path, _ = dataset
    full = list(seed_7)
    rng = random.Random(f"{killed}-{resumed}")
    for start in (4 * rng.randrange(1, 49), 96, 100):
        before = _merged(path, workers=killed, batch=4, start=0, batches=start // 4)
        after = _merged(path, workers=resumed, batch=4, start=start, batches=(400 - start) // 4)
        assert before + after == full, start


def test_batches_and_cardinality(dataset):
    path, _ = dataset
    full = _run(path, take=100, seed=7)
    ds = replay_dataset(path, order=GlobalOrder(seed=7, start=8, **SMALL), batch_size=8)
    batches = collect(ds)
    assert int(ds.cardinality()) == len(batches) == 12  # 92 elements: 11 of 8, then 4
    assert [int(i) for b in batches for i in b[fmt.INDEX_KEY]] == full[8:]
    ctx = _context(2, 1)
    order = GlobalOrder(seed=7, start=8, global_batch_size=8, **SMALL)
    ds = replay_dataset(path, order=order, batch_size=4, drop_remainder=True, input_context=ctx)
    batches = collect(ds)
    assert int(ds.cardinality()) == len(batches) == 11  # its 4 of each of the 11 whole batches
    assert [int(i) for b in batches for i in b[fmt.INDEX_KEY]] == [
        i for b in range(1, 12) for i in full[b * 8 + 4 : b * 8 + 8]
    ]


def test_decoded_elements_are_the_stored_ones(dataset):
    """One epoch yields every stored element once, each decoded as stored, key by key."""
    path, expected = dataset
    by_index = {int(e[fmt.INDEX_KEY]): e for e in expected["elements"]["all"]}
    elements = collect(replay_dataset(path, order=GlobalOrder(seed=1, **SMALL)))
    assert len(elements) == len(by_index) == sum(COUNTS)
    assert sorted(indices(elements)) == sorted(by_index)
    for element in elements:
        stored = by_index[int(element[fmt.INDEX_KEY])]
        assert sorted(element) == sorted(stored)
        for key, value in element.items():
            np.testing.assert_array_equal(value, stored[key], err_msg=key)


def test_compressed_shards_give_the_same_order(tmp_path, dataset):
    path, expected = dataset
    for compression in ("GZIP", "ZLIB"):
        other = tmp_path / compression
        write_dataset(other, num_examples_per_shard=COUNTS, compression=compression, seed=4)
        assert _run(str(other), take=250, seed=7, start=50) == _run(
            path, take=250, seed=7, start=50
        )


def test_splits_are_read_as_one_sequence(tmp_path):
    """The chosen splits' shards, in the order asked, are one sequence of shards: one
    permutation of all their records an epoch, blocks of both splits mixed in its windows."""
    counts = {"train": (9, 14), "test": (5,)}
    expected = write_dataset(tmp_path, num_examples_per_shard=counts, split_names=["train", "test"])
    runs = {}
    for split in ("train", "test", ["test", "train"]):
        ds = replay_dataset(str(tmp_path), split=split, order=GlobalOrder(seed=0, **SMALL))
        names = [split] if isinstance(split, str) else split
        stored = all_indices(expected, names)
        shard_counts = [n for name in names for n in counts[name]]
        first = np.cumsum((0, *shard_counts))
        where = positions_records(
            plan_blocks(shard_counts, block_length=4), range(len(stored)), seed=0, window_blocks=3
        )
        runs[str(split)] = indices(collect(ds))
        assert runs[str(split)] == [stored[first[s] + r] for s, r in where], split
    both, test = runs["['test', 'train']"], set(runs["test"])
    assert sorted(both) == sorted(all_indices(expected))
    assert both not in (runs["test"] + runs["train"], runs["train"] + runs["test"])
    assert any(i in test for i in both[:12]) and any(i not in test for i in both[:12])


def test_options_it_does_not_take_are_refused(dataset):
    path, _ = dataset
    order = GlobalOrder(seed=0)
    for keyword in (
        {"shuffle_buffer": 10},
        {"shuffle_shards": True},
        {"seed": 3},
        {"balance": "class"},
        {"block_length": 8},
        {"reader_func": lambda datasets: datasets},
    ):
        name = next(iter(keyword))
        with pytest.raises(ValueError, match=f"not for {name}"):
            replay_dataset(path, order=order, **keyword)
    with pytest.raises(ValueError, match="not a multiple of global_batch_size 8"):
        GlobalOrder(seed=0, start=12, global_batch_size=8)
    with pytest.raises(ValueError, match="integer >= 0"):
        GlobalOrder(seed=-1)
    with pytest.raises(ValueError, match="not divisible by the 3 input pipelines"):
        replay_dataset(
            path, order=GlobalOrder(seed=0, global_batch_size=8), input_context=_context(3, 0)
        )


def test_a_dataset_before_format_4_is_refused_and_still_read_in_order(tmp_path):
    expected = write_dataset(tmp_path, format_version=3)
    with pytest.raises(NoOffsetsError, match="format_version 3 has no record offsets"):
        replay_dataset(str(tmp_path), order=GlobalOrder(seed=0))
    ordered = replay_dataset(str(tmp_path), deterministic=True)  # without: any interleaving
    assert indices(collect(ordered)) == all_indices(expected)


def _tamper_offsets(path, shard: int, change) -> None:
    """Rewrites a shard's offsets file with `change(bytes)`, its size and digest in the manifest
    too (a manifest crafted to agree with it)."""
    manifest = json.loads((path / fmt.MANIFEST_FILENAME).read_text())
    entry = manifest["splits"]["all"]["shards"][shard]
    file = path / fmt.offsets_filename(entry["filename"])
    data = change(file.read_bytes())
    file.write_bytes(data)
    entry["offsets"] = {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_manifest(path, manifest)


def test_offsets_that_disagree_with_the_manifest_are_refused_naming_the_file(tmp_path):
    write_dataset(tmp_path, num_examples_per_shard=(6, 5), compression="NONE")
    manifest = json.loads((tmp_path / fmt.MANIFEST_FILENAME).read_text())
    name = manifest["splits"]["all"]["shards"][1]["filename"]
    file = tmp_path / fmt.offsets_filename(name)
    file.write_bytes(file.read_bytes()[:8] * 5)  # same size, other bytes
    with pytest.raises(replay.CorruptShardError, match=f"{name}.offsets: record offsets: SHA-256"):
        replay_dataset(str(tmp_path), order=GlobalOrder(seed=0))
    file.unlink()
    with pytest.raises(replay.MissingShardError, match="record offsets missing"):
        replay_dataset(str(tmp_path), order=GlobalOrder(seed=0))


def test_an_offset_that_is_not_a_record_start_fails_naming_the_shard(tmp_path):
    expected = write_dataset(tmp_path, num_examples_per_shard=(6, 5), compression="NONE")
    shard = expected["shards"]["all"][0]

    def shift(data: bytes) -> bytes:  # record 4 "starts" 3 bytes into its frame
        offsets = list(fmt.parse_offsets(data))
        offsets[4] += 3
        return fmt.offsets_bytes(offsets)

    _tamper_offsets(tmp_path, 0, shift)
    ds = replay_dataset(str(tmp_path), order=GlobalOrder(seed=0, block_length=1))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="is corrupt, truncated or unreadable"
    ) as e:
        collect(ds)
    assert shard in e.value.message
    # the shard checker finds it too, and says which record
    with pytest.raises(replay.CorruptShardError, match="record 4 does not start where"):
        replay.verify_dataset(str(tmp_path))


def test_a_corrupt_record_fails_naming_its_shard(tmp_path):
    expected = write_dataset(tmp_path, num_examples_per_shard=(6, 5), compression="NONE")
    shard = expected["shards"]["all"][1]
    with open(shard, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="is corrupt, truncated") as e:
        collect(replay_dataset(str(tmp_path), order=GlobalOrder(seed=0, block_length=5)))
    assert shard in e.value.message


@pytest.mark.parametrize("start", [0, 40])
def test_each_pipeline_reads_only_the_records_of_its_own_positions(dataset, start):
    """With 4 pipelines each reads the frames of its own positions at or after `start` and no
    other byte (the layer's own counter): together the rest of the epoch, each record once;
    the records come in the order's sequence."""
    path, _ = dataset
    info = replay.load_info(path)
    n, batch, workers = sum(COUNTS), 8, 4
    order = GlobalOrder(seed=7, start=start, global_batch_size=batch, **SMALL)
    blocks = plan_blocks(COUNTS, block_length=4)
    first = np.cumsum((0, *COUNTS))
    every = Records(info, read_spans(info, None))
    total = 0
    for w in range(workers):
        source = Records(info, read_spans(info, None))
        ds = pipeline_batches(
            source, order, slots=Slots(batch, workers, w), repeat=False, batch_size=3
        )
        got = [record for batch_ in ds for record in batch_.numpy()]
        mine = [p for p in range(start, n) if p % batch // (batch // workers) == w]
        where = positions_records(blocks, mine, seed=7, window_blocks=3)
        assert got == [every[int(first[s] + r)] for s, r in where]
        assert source.bytes_read == sum(len(r) + FRAME_BYTES for r in got)
        total += source.bytes_read
    rest = positions_records(blocks, range(start, n), seed=7, window_blocks=3)
    assert total == sum(len(every[int(first[s] + r)]) + FRAME_BYTES for s, r in rest)
