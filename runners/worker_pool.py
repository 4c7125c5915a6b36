"""Beam worker pool for ``--environment_type EXTERNAL``, limited to one numeric thread per worker.

The sidecar next to each Flink TaskManager (or the local stand-in for one)::

    /path/to/venv/bin/python -m runners.worker_pool --service_port 50000

is Beam's ``python -m apache_beam.runners.worker.worker_pool_main`` with two differences:

- SDK workers are started with this interpreter (`sys.executable`), not a bare ``python`` from
  ``PATH``: started from a virtualenv that is not activated, Beam's pool starts workers without
  apache_beam (``ModuleNotFoundError``, visible only in the pool's output);
- `runners.threads`'s environment is exported first, so every worker gets one numpy/BLAS/TF
  thread; a worker's output goes to the pool's output, and a worker that exits with an error is
  logged there with its exit code (a runner that cancels a worker's control stream, as Flink
  does when it releases the worker, ends it cleanly: `run_harness`);
- a pool may serve several runners (e.g. two TaskManagers on one host): each starts workers
  with the same ids (Flink: ``1-1``, ``2-1``, ...), and Beam's pool keeps one process per id and
  kills it on ``StopWorker``, i.e. it killed the other runner's live worker. This pool keeps
  every process of an id and stops one only when the stop is unambiguous (`WorkerPool.StopWorker`).

External workers do not install staged packages: this project must be installed (``pip install
-e .`` or a container image with it) where the pool runs.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import threading
import time
import traceback

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker import worker_pool_main

from runners import threads

_LOGGER = logging.getLogger("runners.worker_pool")


class WorkerPool(worker_pool_main.BeamFnExternalWorkerPoolServicer):
    """Beam's worker pool servicer, starting SDK worker processes with `sys.executable`, whose
    ``StopWorker`` never kills a worker that shares its id with another runner's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        # per worker id: every process started with it and not yet stopped, and how many
        # StartWorker requests for it no StopWorker has answered yet (one per runner's worker)
        self._processes: dict[str, list[subprocess.Popen]] = {}
        self._unstopped: dict[str, int] = {}

    def StartWorker(self, start_worker_request, unused_context):  # noqa: N802 (gRPC name)
        """Starts one SDK worker process that connects to the request's control endpoint."""
        if not self._use_process or self._container_executable:
            return super().StartWorker(start_worker_request, unused_context)
        worker_id = start_worker_request.worker_id
        code = (
            "from runners.worker_pool import run_harness; "
            f"run_harness({start_worker_request.control_endpoint.url!r}, worker_id={worker_id!r}, "
            f"state_cache_size={self._state_cache_size:d}, "
            f"data_buffer_time_limit_ms={self._data_buffer_time_limit_ms:d})"
        )
        try:
            process = subprocess.Popen([sys.executable, "-c", code], close_fds=True)
        except OSError:
            return beam_fn_api_pb2.StartWorkerResponse(error=traceback.format_exc())
        _LOGGER.info("started SDK worker %s (pid %d)", worker_id, process.pid)
        with self._lock:
            self._processes[worker_id] = [*self._live(worker_id), process]
            self._unstopped[worker_id] = self._unstopped.get(worker_id, 0) + 1
        threading.Thread(
            target=_report_exit, args=(worker_id, process), daemon=True, name=f"watch-{worker_id}"
        ).start()
        return beam_fn_api_pb2.StartWorkerResponse()

    def StopWorker(self, stop_worker_request, unused_context):  # noqa: N802 (gRPC name)
        """Stops the worker process of the request's id when that is unambiguous: one runner
        started a worker with this id and has not stopped it, and at most one such process still
        runs. Otherwise (runners sharing this pool gave their workers the same id) none is
        stopped: which one this runner's is cannot be told, and killing the other runner's
        live worker fails its tasks. An SDK harness ends by itself once its runner closes its
        control stream, which runners do before ``StopWorker`` (Beam's
        ``ExternalEnvironmentFactory``); the stop only makes sure of it."""
        worker_id = stop_worker_request.worker_id
        with self._lock:
            unstopped = self._unstopped.get(worker_id, 0)
            live = self._live(worker_id)
            if unstopped > 1:
                self._unstopped[worker_id] = unstopped - 1
                self._processes[worker_id] = live
            elif unstopped:
                del self._unstopped[worker_id], self._processes[worker_id]
        if not unstopped:  # not ours: a thread worker, a container's, or one stopped already
            return super().StopWorker(stop_worker_request, unused_context)
        if unstopped > 1 or len(live) > 1:
            _LOGGER.warning(
                "StopWorker %s is ambiguous (%d workers started with this id and not stopped, "
                "running: pids %s): none stopped, each ends when its runner closes its control "
                "stream", worker_id, unstopped, ", ".join(str(p.pid) for p in live) or "none",
            )  # fmt: skip
        elif live:
            _LOGGER.info("stopping SDK worker %s (pid %d)", worker_id, live[0].pid)
            worker_pool_main.kill_process_gracefully(live[0])
        return beam_fn_api_pb2.StopWorkerResponse()

    def live_pids(self, worker_id: str) -> list[int]:
        """The pids of the running processes started with `worker_id` and not yet stopped."""
        with self._lock:
            return [process.pid for process in self._live(worker_id)]

    def _live(self, worker_id: str) -> list[subprocess.Popen]:
        return [p for p in self._processes.get(worker_id, ()) if p.poll() is None]


def run_harness(control_url: str, **options) -> None:
    """An SDK worker process: Beam's ``SdkHarness(control_url, **options).run()``, which ends
    when its runner closes the control stream. A runner that cancels the stream (Flink's
    ``FnApiControlClient.close``: ``CANCELLED: Runner closed connection``) makes `run` raise, so
    every worker a job released would exit with code 1 and a traceback; that end is a clean one
    here (code 0). Any other error still ends the process with it."""
    import grpc
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    try:
        SdkHarness(control_url, **options).run()
    except grpc.RpcError as e:
        code = getattr(e, "code", None)
        if not callable(code) or code() != grpc.StatusCode.CANCELLED:
            raise


def _report_exit(worker_id: str, process: subprocess.Popen) -> None:
    code = process.wait()
    if code in (0, -15):  # -15: stopped by StopWorker
        _LOGGER.info("SDK worker %s (pid %d) ended (code %d)", worker_id, process.pid, code)
    else:
        _LOGGER.error("SDK worker %s (pid %d) exited with code %d", worker_id, process.pid, code)


def serve(*, port: int, host: str = "[::]") -> tuple[int, object]:
    """Starts the pool on ``host:port`` (port 0: a free one); returns (port, gRPC server)."""
    threads.export_thread_env()
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc
    from apache_beam.utils import thread_pool_executor

    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)],
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    pool = WorkerPool(use_process=True)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()
    return bound, server


def main(argv: list[str] | None = None) -> None:
    """Runs the worker pool until interrupted (``--service_port``, optional ``--bind_host``)."""
    parser = argparse.ArgumentParser(prog="python -m runners.worker_pool")
    parser.add_argument("--service_port", type=int, required=True, help="port (0: any free)")
    parser.add_argument(
        "--bind_host", default="[::]", help="address to listen on (default: all interfaces)"
    )
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    port, server = serve(port=args.service_port, host=args.bind_host)
    _LOGGER.info("listening on %s:%d; workers run %s", args.bind_host, port, sys.executable)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
