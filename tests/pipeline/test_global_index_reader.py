"""`replay.global_index` on a dataset: its record indices, read with `open_records`, are the
elements ``replay_dataset(order=GlobalOrder(...))`` yields, for W input pipelines merged by
position, runs started mid-epoch, splits, slices of them and the default block and window
sizes. Elements are compared by their unique ``index`` (`write_dataset`)."""

from __future__ import annotations

import numpy as np
import pytest

from replay import open_records
from replay.global_index import GlobalIndex
from replay.global_order import GlobalOrder
from tests.support.global_runs import record_index, tf_run
from tests.support.replay_fixtures import write_dataset

COUNTS = {"train": (37, 0, 50, 13), "eval": (6, 9)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("global_index"))
    write_dataset(path, num_examples_per_shard=COUNTS, split_names=list(COUNTS), compression="NONE")
    return path


# (split, seed, start, global batch, W, block_length, window_blocks)
CASES = [
    ("train", 7, 0, 8, 1, 4, 3),
    ("train", 7, 96, 8, 2, 4, 3),
    ("train", 2**32 - 1, 40, 4, 4, 1, 1024),
    ("train[5:95]", 3, 18, 6, 2, 2, 5),
    (["eval", "train[:30%]"], 0, 10, 10, 2, 1, 4),
    ("eval", 11, 0, None, 3, 1, 1024),
]


@pytest.mark.parametrize(("split", "seed", "start", "g", "workers", "block", "window"), CASES)
def test_global_index_is_the_tf_data_order(dataset, split, seed, start, g, workers, block, window):
    order = GlobalOrder(
        seed=seed, start=start, global_batch_size=g, block_length=block, window_blocks=window
    )
    records = open_records(dataset, split=split)
    n = len(records)
    take = (2 * n + 2 * (g or workers)) // (g or workers) * (g or workers)  # past an epoch's end
    ids = GlobalIndex.of(records, order).records(np.arange(start, start + take))
    expected = [record_index(r) for r in records.__getitems__(ids)]
    epoch = (start // n + 1) * n  # the next epoch, whole: a permutation of the records
    assert sorted(GlobalIndex.of(records, order).records(range(epoch, epoch + n))) == [*range(n)]
    assert tf_run(dataset, split, order, workers=workers, take=take) == expected
