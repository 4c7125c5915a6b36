"""`replay_dataset(order=GlobalOrder(...), service=...)` against in-process tf.data services
(`replay.reader`, `replay.global_reader.check_positions`): each pipeline's elements in order,
compared with the same pipeline read without the service, never as sets; the configurations the
order does not hold under refused with their reason, or (more than one service worker, which no
option shows) failed while read."""

from __future__ import annotations

import pytest
import tensorflow as tf

from replay import format as fmt
from replay import replay_dataset
from replay.global_order import GlobalOrder
from tests.support.data_service import data_service
from tests.support.replay_elements import collect, indices
from tests.support.replay_fixtures import write_dataset

# 100 records (an empty shard, shard ends inside blocks), 9 windows of 3 blocks of 4.
COUNTS = (37, 0, 50, 13)
SMALL = {"block_length": 4, "window_blocks": 3}
G = 8
ONLY = "the global order under the tf.data service holds only with"
svc = tf.data.experimental.service


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("global-service")
    write_dataset(path, num_examples_per_shard=COUNTS, compression="NONE", seed=4)
    return str(path)


@pytest.fixture(scope="module")
def one_worker():
    with data_service(1) as address:
        yield address


@pytest.fixture(scope="module")
def two_workers():
    with data_service(2) as address:
        yield address


def _run(path: str, *, workers: int, worker: int, start: int, take: int | None, **read) -> list:
    """Pipeline `worker` of `workers`: its indices from `start` (`take` of them, repeated;
    else to the end of start's epoch), batched by G / workers."""
    ds = replay_dataset(
        path,
        order=GlobalOrder(seed=7, start=start, global_batch_size=G, **SMALL),
        features=[fmt.INDEX_KEY],
        repeat=take is not None,
        batch_size=G // workers,
        input_context=tf.distribute.InputContext(workers, worker),
        **read,
    )
    if take is not None:
        ds = ds.take(take // (G // workers))
    return [int(i) for b in collect(ds) for i in b[fmt.INDEX_KEY]]


def _merged(runs: list[list[int]]) -> list[int]:
    """The pipelines' runs merged by position: global batch after global batch."""
    per = G // len(runs)
    return [
        i
        for b in range(-(-len(runs[0]) // per))
        for run in runs
        for i in run[b * per : (b + 1) * per]
    ]


@pytest.mark.slow  # 6 tf.data service jobs and 9 plain pipelines per case
@pytest.mark.parametrize("start", [0, 48])
def test_one_service_worker_keeps_each_pipelines_order(dataset, one_worker, start):
    """W = 1 and 2 pipelines, each its own job of the one service worker, each pipeline's
    sequence that of the pipeline read without the service; from the epoch's start and from
    mid-epoch (N = 100), repeated across the epoch boundary, and to the epoch's end."""
    mode = {"processing_mode": "parallel_epochs", "service": one_worker}
    for take in (160, None):
        whole = _run(dataset, workers=1, worker=0, start=start, take=take)
        assert len(whole) == (take or 100 - start)
        for workers in (1, 2):
            runs = []
            for w in range(workers):
                per = None if take is None else take // workers
                plain = _run(dataset, workers=workers, worker=w, start=start, take=per)
                served = _run(dataset, workers=workers, worker=w, start=start, take=per, **mode)
                assert served == plain, (workers, w, take)
                runs.append(served)
            assert _merged(runs) == whole, (workers, take)


def test_sharding_policy_off_is_parallel_epochs(dataset, one_worker):
    plain = _run(dataset, workers=2, worker=1, start=8, take=None)
    mode = {"processing_mode": svc.ShardingPolicy.OFF, "service": one_worker}
    assert _run(dataset, workers=2, worker=1, start=8, take=None, **mode) == plain


def test_more_than_one_service_worker_fails_while_read(dataset, two_workers):
    """Each parallel_epochs worker yields every element: the second copy of a position is out
    of place (a whole epoch, so both workers' copies arrive)."""
    mode = {"processing_mode": "parallel_epochs", "service": two_workers}
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{ONLY}.*where the order has"):
        _run(dataset, workers=1, worker=0, start=0, take=None, **mode)


@pytest.mark.parametrize(
    ("read", "why"),
    [
        ({}, "'distributed_epoch': with more than one service worker it hands the epochs to"),
        ({"processing_mode": svc.ShardingPolicy.DYNAMIC}, "DYNAMIC.*hands the epochs"),
        ({"processing_mode": svc.ShardingPolicy.FILE}, "FILE.*splits this pipeline's elements"),
        ({"processing_mode": svc.ShardingPolicy.DATA}, "DATA.*splits this pipeline's"),
        ({"processing_mode": svc.ShardingPolicy.FILE_OR_DATA}, "FILE_OR_DATA.*splits"),
        ({"processing_mode": svc.ShardingPolicy.HINT}, "HINT.*splits"),
        (
            {"processing_mode": "parallel_epochs", "job_name": "a_named_job"},
            "not job_name: consumers of a named job take its elements first come, first served",
        ),
    ],
)
def test_configurations_the_order_does_not_hold_under_are_refused(dataset, one_worker, read, why):
    with pytest.raises(ValueError, match=f"{ONLY} processing_mode='parallel_epochs'.*{why}"):
        replay_dataset(dataset, order=GlobalOrder(seed=0), service=one_worker, **read)


def test_unbatched_elements_through_the_service(dataset, one_worker):
    order = GlobalOrder(seed=3, start=40, **SMALL)
    plain = indices(collect(replay_dataset(dataset, order=order, features=[fmt.INDEX_KEY])))
    served = replay_dataset(
        dataset,
        order=order,
        features=[fmt.INDEX_KEY],
        service=one_worker,
        processing_mode="parallel_epochs",
    )
    assert int(served.cardinality()) == 60
    assert indices(collect(served)) == plain
