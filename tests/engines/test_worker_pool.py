"""One worker pool serving two runners: workers that share an id never kill each other.

Two TaskManagers on one pool both start workers ``1-1``, ``2-1``, ...; Beam's pool kept one
process per id and its ``StopWorker`` killed the other TaskManager's live worker (its tasks then
failed with "No client connected within timeout"). Here two real control endpoints (gRPC
servers standing for the two runners) each get a real SDK harness process from our pool, with
the same id; no JVM needed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import grpc
import pytest
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.utils import thread_pool_executor

from runners.worker_pool import WorkerPool

pytestmark = pytest.mark.slow

TIMEOUT_S = 120.0  # a harness process to start (imports Beam) on 2 busy cores
WORKER_ID = "1-1"


class _Runner(beam_fn_api_pb2_grpc.BeamFnControlServicer):
    """A runner's control endpoint: holds the control stream of the one harness that connects
    until `close`, which cancels it as Flink's runner does before ``StopWorker`` (``CANCELLED:
    Runner closed connection``); notes whether the stream was lost from the harness's side."""

    def __init__(self):
        self.connected, self.closed, self.lost = threading.Event(), threading.Event(), False
        self.worker_id = None
        self.server = grpc.server(thread_pool_executor.shared_unbounded_instance())
        beam_fn_api_pb2_grpc.add_BeamFnControlServicer_to_server(self, self.server)
        self.url = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def Control(self, request_iterator, context):  # noqa: N802 (gRPC name)
        self.worker_id = dict(context.invocation_metadata()).get("worker_id")
        self.connected.set()
        while not self.closed.wait(0.1):
            if not context.is_active():  # the harness's end went away: its process died
                self.lost = True
                return
        context.abort(grpc.StatusCode.CANCELLED, "Runner closed connection")
        yield  # never reached: a generator, as a stream of requests

    def close(self) -> None:
        self.closed.set()


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {TIMEOUT_S:g} s"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stop_from_one_runner_does_not_kill_the_other_runners_worker_of_the_same_id(caplog):
    caplog.set_level(logging.INFO, logger="runners.worker_pool")
    pool = WorkerPool(use_process=True)
    first, second = _Runner(), _Runner()
    pids = []
    try:
        for runner in (first, second):
            request = beam_fn_api_pb2.StartWorkerRequest(
                worker_id=WORKER_ID,
                control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=runner.url),
            )
            assert pool.StartWorker(request, None).error == ""
        _wait(lambda: first.connected.is_set() and second.connected.is_set(), "no harness came")
        assert first.worker_id == second.worker_id == WORKER_ID
        pids = pool.live_pids(WORKER_ID)
        assert len(pids) == 2, pids  # both processes kept

        # the first runner is done with its worker: it closes the control stream, then stops it
        first.close()
        stop = beam_fn_api_pb2.StopWorkerRequest(worker_id=WORKER_ID)
        pool.StopWorker(stop, None)
        assert "StopWorker 1-1 is ambiguous" in caplog.text
        # the first harness ends by itself (its control stream closed); the second one lives on
        _wait(lambda: len(pool.live_pids(WORKER_ID)) == 1, "the first harness did not end")
        (survivor,) = pool.live_pids(WORKER_ID)
        (ended,) = set(pids) - {survivor}
        _wait(lambda: f"(pid {ended}) ended (code 0)" in caplog.text, "no clean end logged")
        assert _alive(survivor)
        assert not second.lost and not second.closed.is_set()

        # the second runner's stop is unambiguous: Beam's behaviour, its process is stopped
        pool.StopWorker(stop, None)
        assert not _alive(survivor)  # stopped and reaped before StopWorker returned
        _wait(lambda: second.lost, "the second harness's control stream was not lost")
        assert pool.live_pids(WORKER_ID) == []
        _wait(lambda: f"(pid {survivor}) ended (code -15)" in caplog.text, "no stop logged")
        assert "exited with code" not in caplog.text
    finally:
        for runner in (first, second):
            runner.close()
            runner.server.stop(None)
        for pid in filter(_alive, pids):  # after a failure: end both harnesses
            os.kill(pid, signal.SIGKILL)
