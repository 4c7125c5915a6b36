"""`replay_dataset(service=...)` against an in-process tf.data service (dispatcher + 2 workers)."""

from __future__ import annotations

import collections

import pytest
import tensorflow as tf

from replay import replay_dataset
from tests.support.data_service import data_service
from tests.support.replay_fixtures import write_dataset

NUM_WORKERS = 2


@pytest.fixture(scope="module")
def service():
    with data_service(NUM_WORKERS) as address:
        yield address


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("service"))
    expected = write_dataset(path, num_examples_per_shard=(5, 7, 3, 6), compression="ZLIB")
    return path, sorted(int(e["index"]) for e in expected["elements"]["all"])


def _counts(ds: tf.data.Dataset) -> collections.Counter:
    return collections.Counter(int(i) for batch in ds.as_numpy_iterator() for i in batch["index"])


def test_distributed_epoch_yields_each_element_once(service, dataset):
    path, indices = dataset
    ds = replay_dataset(
        path,
        service=service,
        processing_mode="distributed_epoch",
        job_name="replay-distributed",
        shuffle_shards=True,
        batch_size=4,
    )
    counts = _counts(ds)
    assert sorted(counts) == indices
    assert set(counts.values()) == {1}


def test_parallel_epochs_yields_each_element_once_per_worker(service, dataset):
    path, indices = dataset
    ds = replay_dataset(
        path, service=service, processing_mode="parallel_epochs", features=["index"], batch_size=4
    )
    counts = _counts(ds)
    assert sorted(counts) == indices
    assert set(counts.values()) == {NUM_WORKERS}
