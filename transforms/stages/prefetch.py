"""Run an iterator ahead in a background thread, and jobs in a pool (decode/compute overlaps
with writing).

The DirectRunner's default on small machines runs every DoFn in one thread of one process
(`runners.direct`), so a stage that decodes and computes features, then writes and analyses the
result, leaves the second core idle. numpy, scipy.fft, libsndfile, TensorFlow ops and the TFRecord
writer release the GIL, so producing item i+1 in a thread while item i is consumed uses it (measured
on 2 cores: docs/performance.md). Nothing in the standard library or in our dependencies runs a
plain Python iterator ahead in a thread (tf.data's prefetch needs tensors), hence this small helper;
`ComputePool` gives the read and write stages one way to run a job in threads or in place.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
_END = object()
_POLL_S = 0.1  # how often a blocked producer checks whether the consumer went away


def prefetch(items: Iterable[T], *, depth: int = 2) -> Iterator[T]:
    """Yields `items` in order, produced by a background thread up to `depth` items ahead.

    An exception raised by `items` is raised here, at the same position. Closing the returned
    generator (or an exception in the consumer) stops the producer and waits for it.

    Args:
      items: any iterable; it is iterated (and closed, if it is a generator) in the thread.
      depth: how many produced items may wait (bounds memory); >= 1.

    Raises:
      ValueError: `depth` < 1.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        it = iter(items)
        try:
            for item in it:
                if not put((item, None)):
                    return
            put((_END, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put((_END, e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="audiorecords-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = slots.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        thread.join()


class ComputePool:
    """`threads` worker threads, or with one thread none: jobs then run where they are submitted.

    Either way `submit` returns a Future whose `result()` gives the job's value or raises its
    error, so callers handle one kind of result.
    """

    def __init__(self, threads: int, *, name: str):
        self._executor = ThreadPoolExecutor(threads, name) if threads > 1 else None

    def submit(self, job: Callable[..., R], /, **kwargs) -> Future:
        if self._executor is not None:
            return self._executor.submit(job, **kwargs)
        done: Future = Future()
        try:
            done.set_result(job(**kwargs))
        except Exception as e:  # noqa: BLE001 - raised by result(), as from a thread
            done.set_exception(e)
        return done

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)
