"""Read-ahead threads: transforms.stages.prefetch (its record-pipeline use, a file failing in the
writer thread: tests/pipeline/test_prefetch_record.py)."""

from __future__ import annotations

import threading

import pytest

from transforms.stages.prefetch import ComputePool, prefetch


def test_items_arrive_in_order_from_another_thread():
    seen_threads = set()

    def produce():
        for i in range(50):
            seen_threads.add(threading.current_thread().name)
            yield i

    assert list(prefetch(produce(), depth=3)) == list(range(50))
    assert seen_threads == {"audiorecords-prefetch"}


def test_an_error_is_raised_at_its_position():
    def produce():
        yield 1
        yield 2
        raise KeyError("bad item 3")

    got = []
    with pytest.raises(KeyError, match="bad item 3"):
        for item in prefetch(produce()):
            got.append(item)
    assert got == [1, 2]


def test_closing_early_stops_and_closes_the_producer():
    closed = threading.Event()
    produced = []

    def produce():
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    it = prefetch(produce(), depth=2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()  # joins the producer thread: no waiting on the clock here
    assert closed.is_set()
    assert len(produced) <= 3 + 2 + 1  # taken + queued + the one being put
    assert not [t for t in threading.enumerate() if t.name == "audiorecords-prefetch"]


def test_the_producer_runs_ahead_of_a_slow_consumer():
    ahead = threading.Event()

    def produce():
        yield from range(4)
        ahead.set()  # items 1-3 were produced while the consumer still held item 0

    for item in prefetch(produce(), depth=4):
        if item == 0:  # the consumer is busy until the producer has run ahead (a hang guard of
            assert ahead.wait(60), "the producer did not run ahead"  # 60 s, never a race)


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be >= 1"):
        next(prefetch([1], depth=0))


@pytest.mark.parametrize("threads", [1, 2])
def test_compute_pool_gives_futures_in_threads_or_in_place(threads):
    pool = ComputePool(threads, name="test-pool")
    try:
        where = pool.submit(lambda: threading.current_thread().name).result()
        assert where.startswith("test-pool") if threads > 1 else where == "MainThread"
        assert pool.submit(lambda x: x * 2, x=21).result() == 42
        failed = pool.submit(lambda: 1 / 0)  # the error waits for result(), in both modes
        with pytest.raises(ZeroDivisionError):
            failed.result()
    finally:
        pool.shutdown()
