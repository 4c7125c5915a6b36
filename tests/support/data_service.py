"""An in-process tf.data service: a dispatcher and its workers, for the `service=` tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf


@contextlib.contextmanager
def data_service(num_workers: int) -> Iterator[str]:
    """A dispatcher with `num_workers` workers, all in this process; yields its address
    (``grpc://localhost:port``), stops them on exit."""
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer()
    address = dispatcher.target.split("://")[1]
    workers = [
        service.WorkerServer(service.WorkerConfig(dispatcher_address=address))
        for _ in range(num_workers)
    ]
    try:
        yield dispatcher.target
    finally:
        for worker in workers:
            worker.stop()
        dispatcher.stop()
