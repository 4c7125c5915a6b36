"""`replay.samplers` with real PyTorch and real Grain loaders over `open_records`: the global
batches of W = 1 and W = 2 pipelines, merged by position, are tf.data's global order
(`replay_dataset(order=GlobalOrder(...))`); a run stopped mid-epoch and resumed at its saved
position (PyTorch), or restored from Grain's own iterator state, continues the same sequence.
Records are compared as bytes and by their unique ``index`` (`write_dataset`)."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys

import grain
import numpy as np
import pytest
import torch.multiprocessing
from torch.utils.data import DataLoader

from replay import open_records
from replay.global_index import GlobalIndex
from replay.global_order import GlobalOrder
from replay.samplers import GlobalOrderIndexSampler, GlobalOrderSampler, global_order_dataset
from tests.support.global_runs import merge, record_index, tf_run
from tests.support.replay_fixtures import write_dataset
from tests.support.torch_distributed import run_rank

# 96 train records (a shard empty, blocks cut by shard ends), 12 global batches of 8 an epoch
COUNTS = {"train": (37, 0, 46, 13), "eval": (5, 4)}
SPLIT = "train"
G = 8
ORDER = {"seed": 5, "global_batch_size": G, "block_length": 2, "window_blocks": 5}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("samplers"))
    write_dataset(path, num_examples_per_shard=COUNTS, split_names=list(COUNTS), compression="NONE")
    return path


@pytest.fixture(scope="module")
def expected(dataset):
    """Two epochs of the order: the records (bytes, from GlobalIndex) and tf.data's indices."""
    records = open_records(dataset, split=SPLIT)
    n = len(records)
    ids = GlobalIndex.of(records, GlobalOrder(**ORDER)).records(np.arange(2 * n))
    data = records.__getitems__(ids)
    tf_indices = tf_run(dataset, SPLIT, GlobalOrder(**ORDER), workers=2, take=2 * n)
    assert [record_index(r) for r in data] == tf_indices
    return data


def _collate(batch: list[bytes]) -> list[bytes]:
    return batch


def _torch_epochs(records, order: GlobalOrder, *, workers: int, rank: int, epochs, stop=None):
    """Rank `rank`'s records of `epochs` through a DataLoader with 2 worker processes (its
    first `stop` batches of the last epoch), and its sampler."""
    sampler = GlobalOrderSampler(records, order=order, num_replicas=workers, rank=rank)
    per = G // workers
    loader = DataLoader(
        records, batch_size=per, sampler=sampler, num_workers=2, collate_fn=_collate
    )
    got = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        for i, batch in enumerate(loader):
            if epoch == epochs[-1] and i == stop:
                break
            assert len(batch) == per
            got.extend(batch)
    return got, sampler


@pytest.mark.parametrize("workers", [1, 2])
def test_torch_dataloader_gives_the_global_batches(dataset, expected, workers):
    records = open_records(dataset, split=SPLIT)
    runs = []
    for rank in range(workers):
        got, sampler = _torch_epochs(
            records, GlobalOrder(**ORDER), workers=workers, rank=rank, epochs=[0, 1]
        )
        assert len(got) == 2 * len(sampler) == 2 * len(records) // workers
        runs.append(got)
    assert merge(runs, G // workers) == expected


@pytest.mark.parametrize(("killed", "resumed"), [(1, 2), (2, 2), (2, 1)])
def test_torch_run_stopped_mid_epoch_resumes_at_its_position(dataset, expected, killed, resumed):
    """Stopped after 5 global batches of epoch 1 (worker processes shut down with the loader),
    resumed at `GlobalOrderSampler.position` with another number of pipelines."""
    records = open_records(dataset, split=SPLIT)
    n = len(records)
    before, positions = [], set()
    for rank in range(killed):
        got, sampler = _torch_epochs(
            records, GlobalOrder(**ORDER), workers=killed, rank=rank, epochs=[0, 1], stop=5
        )
        before.append(got)
        positions.add(sampler.position(5))
    assert positions == {n + 5 * G}
    order = GlobalOrder(**{**ORDER, "start": n + 5 * G})
    after = [
        _torch_epochs(records, order, workers=resumed, rank=rank, epochs=[1])[0]
        for rank in range(resumed)
    ]
    assert merge(before, G // killed) + merge(after, G // resumed) == expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # worker processes that import torch / grain: seconds each
def test_torch_distributed_two_processes(dataset, expected, tmp_path):
    """2 processes (gloo, CPU, 127.0.0.1), rank and world size from the process group: their
    global batches merged by position are W = 1's and tf.data's; each rank stopped after 3
    batches of epoch 1 and resumed at the saved position continues its sequence."""
    out = str(tmp_path / "ranks.json")
    torch.multiprocessing.spawn(
        run_rank, args=(dataset, SPLIT, ORDER, _free_port(), out), nprocs=2, join=True
    )
    with open(out) as f:
        ranks = json.load(f)
    digests = [hashlib.sha256(r).hexdigest() for r in expected]
    assert merge([r["full"] for r in ranks], G // 2) == digests
    n = len(open_records(dataset, split=SPLIT))
    for r in ranks:
        assert r["position"] == n + 3 * G
        assert r["stopped"] + r["resumed"] == r["full"][n // 2 :]


def test_the_sampler_contract(dataset):
    """DistributedSampler's: lengths per epoch (a mid-epoch start shortens its epoch only),
    rank and world size of a process without a process group, bad ranks refused."""
    records = open_records(dataset, split=SPLIT)
    n = len(records)
    sampler = GlobalOrderSampler(records, order=GlobalOrder(**{**ORDER, "start": n + 16}))
    assert (sampler.num_replicas, sampler.rank, sampler.epoch) == (1, 0, 1)
    assert len(sampler) == n - 16 and len(list(sampler)) == n - 16
    sampler.set_epoch(2)
    assert len(sampler) == n
    sampler.set_epoch(0)  # before the start: nothing
    assert len(sampler) == 0 and list(sampler) == []
    with pytest.raises(ValueError, match="rank 2 is not in"):
        GlobalOrderSampler(records, order=GlobalOrder(**ORDER), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="not divisible"):
        GlobalOrderSampler(records, order=GlobalOrder(**ORDER), num_replicas=3, rank=0)


def test_import_replay_imports_no_framework():
    code = (
        "import sys, replay, replay.samplers; "
        "bad = {'torch', 'grain', 'tensorflow'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _grain_shard(records, *, workers: int, shard: int, order: GlobalOrder, num_epochs: int):
    sampler = GlobalOrderIndexSampler(
        records, order=order, shard_count=workers, num_epochs=num_epochs
    )
    return grain.DataLoader(
        data_source=records,
        sampler=sampler,
        shard_options=grain.sharding.ShardOptions(shard_index=shard, shard_count=workers),
        worker_count=2,
    )


@pytest.mark.slow  # worker processes that import torch / grain: seconds each
@pytest.mark.parametrize("workers", [1, 2])
def test_grain_dataloader_gives_the_global_batches(dataset, expected, workers):
    records = open_records(dataset, split=SPLIT)
    runs = [
        list(
            _grain_shard(
                records, workers=workers, shard=w, order=GlobalOrder(**ORDER), num_epochs=2
            )
        )
        for w in range(workers)
    ]
    assert [len(run) for run in runs] == [2 * len(records) // workers] * workers
    assert merge(runs, G // workers) == expected


@pytest.mark.slow  # worker processes that import torch / grain: seconds each
def test_grain_iterator_state_restores_the_sequence(dataset, expected):
    """Each of 2 shards read 7 elements into epoch 1, its state saved, the loader dropped; a
    new loader restored from that state continues where it stopped."""
    records = open_records(dataset, split=SPLIT)
    n = len(records)
    runs = []
    for w in range(2):
        loader = _grain_shard(records, workers=2, shard=w, order=GlobalOrder(**ORDER), num_epochs=2)
        it = iter(loader)
        head = [next(it) for _ in range(n // 2 + 7)]
        state = it.get_state()
        del it, loader
        again = iter(
            _grain_shard(records, workers=2, shard=w, order=GlobalOrder(**ORDER), num_epochs=2)
        )
        again.set_state(state)
        runs.append(head + list(again))
    assert merge(runs, G // 2) == expected


@pytest.mark.parametrize("workers", [1, 2])
def test_grain_map_dataset_recipes(dataset, expected, workers):
    """`global_order_dataset` per shard, batched by G / W and started mid-epoch; and the plain
    ``MapDataset.source(...).shuffle(seed)`` recipe, an epoch a permutation."""
    records = open_records(dataset, split=SPLIT)
    n = len(records)
    runs = []
    for w in range(workers):
        ds = global_order_dataset(
            records, order=GlobalOrder(**{**ORDER, "start": n}), shard_index=w, shard_count=workers
        )
        batches = list(ds.batch(G // workers, batch_fn=list))
        runs.append([r for b in batches for r in b])
    assert merge(runs, G // workers) == expected[n:]
    shuffled = list(grain.MapDataset.source(records).shuffle(seed=3))
    assert sorted(shuffled) == sorted(records.__getitems__(range(n))) and shuffled != list(
        records.__getitems__(range(n))
    )


DECODED = ["signal", "log_mel_norm", "index"]  # numeric keys: torch's default_collate stacks them


def _tf_decoded(path: str, epochs: int) -> list[dict]:
    """tf.data's global order, one pipeline, decoded: `epochs` epochs of elements."""
    from replay import replay_dataset

    ds = replay_dataset(
        path, split=SPLIT, order=GlobalOrder(**ORDER), features=DECODED, repeat=True
    )
    n = len(open_records(path, split=SPLIT))
    return list(ds.take(epochs * n).as_numpy_iterator())


def _assert_elements(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for x, y in zip(got, want, strict=True):
        assert sorted(x) == sorted(y) == sorted(DECODED)
        for key in DECODED:
            a, b = np.asarray(x[key]), np.asarray(y[key])
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), key


@pytest.mark.slow  # worker processes that import torch / grain: seconds each
def test_decoded_elements_are_tf_data_s_in_torch_and_grain(dataset):
    """`open_source` (decoded numpy elements) through a torch DataLoader with 2 workers and
    torch's default collate, and through grain.DataLoader with 2 workers and Grain's Batch: the
    same global batches as `replay_dataset(order=...)`, value for value, bit for bit."""
    from replay import open_source

    want = _tf_decoded(dataset, 2)
    source = open_source(dataset, split=SPLIT, features=DECODED)
    sampler = GlobalOrderSampler(source, order=GlobalOrder(**ORDER), num_replicas=1, rank=0)
    loader = DataLoader(source, batch_size=G, sampler=sampler, num_workers=2)
    got = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch in loader:  # a dict of [G, ...] tensors
            got.extend({k: batch[k][i].numpy() for k in DECODED} for i in range(G))
    _assert_elements(got, want)

    grain_loader = grain.DataLoader(  # elements, batched after the loader (docs/training.md)
        data_source=source,
        sampler=GlobalOrderIndexSampler(source, order=GlobalOrder(**ORDER), num_epochs=2),
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1),
        worker_count=2,
    )
    _assert_elements(list(grain_loader), want)


@pytest.mark.slow  # worker processes that import grain
def test_grain_batch_in_the_workers_batches_each_worker_s_elements(dataset):
    """Why the recipe batches after `grain.DataLoader`: with 2 workers, a `Batch` operation
    batches each worker's own elements (every other position), not the global batches."""
    from replay import open_source

    source = open_source(dataset, split=SPLIT, features=["index"])
    loader = grain.DataLoader(
        data_source=source,
        sampler=GlobalOrderIndexSampler(source, order=GlobalOrder(**ORDER), num_epochs=1),
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1),
        operations=[grain.transforms.Batch(batch_size=G)],
        worker_count=2,
    )
    first = next(iter(loader))["index"].tolist()
    want = [int(e["index"]) for e in _tf_decoded(dataset, 1)[: 2 * G]]
    assert first == want[0 : 2 * G : 2]
