"""Read-ahead threads: transforms.record.prefetch, and the read stage that decodes in a thread and
computes features in a pool while the DoFn's thread writes (a file failing on either side)."""

from __future__ import annotations

import threading

import pytest

from pipelines import record_dataset
from tests.support.record_helpers import SAMPLE_DIR, load_manifest, read_records
from transforms.record import file_rows
from transforms.record.prefetch import ComputePool, prefetch


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
    it.close()
    assert closed.wait(5)
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


@pytest.mark.slow
def test_a_file_failing_in_the_writer_thread_mid_file_is_an_error_and_the_rest_is_exact(
    tmp_path, monkeypatch
):
    """Chunks of 2 windows: each file is several chunks decoded and featurised ahead; a failure
    on the DoFn's side after the file's first chunk must drop that file whole (its remaining
    chunks, already computed, are skipped) and leave every other window exactly once."""
    monkeypatch.setattr(file_rows, "_CHUNK_BYTES", 2 * 4000 * 4)  # 2 windows of 4000 frames

    def shard_of(element):
        if int(element["index"]) == 2 and int(element["win_start_idx"]) >= 8000:
            raise ValueError("no shard for this window")
        return 0

    out = tmp_path / "o"
    result = record_dataset(
        input_pattern=str(SAMPLE_DIR / "*.wav"),
        output_dir=str(out),
        win_len=4000,
        features=["log_mel"],
        shard_func=shard_of,
    )
    manifest = load_manifest(out)
    [error] = manifest["errors"]
    assert error["path"].endswith(sorted(p.name for p in SAMPLE_DIR.glob("*.wav"))[2])
    assert error["reason"] == "ValueError: no shard for this window"
    keys = [(int(r["index"]), int(r["win_start_idx"])) for r in read_records(out)]
    expected = [(i, s) for i in (0, 1, 3, 4, 5) for s in range(0, 48000, 4000)]
    assert keys == expected and result.num_examples == 60 and result.num_failed == 1
