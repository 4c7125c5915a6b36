"""``--environment_type EXTERNAL``: check, before submitting, that the worker pool starts workers.

With an external worker pool, the runner asks the pool to start an SDK worker and then waits for
that worker to connect. A worker that dies at start (say the pool runs where apache_beam or this
project is not installed) shows only in the pool's own output, and the launcher waits several
minutes before ending with ``Stream removed (Deadline Exceeded)``; on Flink the task waits for
ever. So the launcher first asks the pool for one worker itself, pointed at a control endpoint it
serves for the purpose, and fails with one line if none connects within
``--worker_start_timeout_s`` (default 60 s; 0 skips the check, e.g. when the launching machine
cannot be reached from the pool's hosts).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import uuid

from apache_beam.options.pipeline_options import PipelineOptions

from runners.support import RunnerError, host_port

WORKER_START_TIMEOUT_S = 60.0


class ExternalWorkerOptions(PipelineOptions):
    """Options of the EXTERNAL environment check (any runner accepts them; only it reads them)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--worker_start_timeout_s",
            type=float,
            default=WORKER_START_TIMEOUT_S,
            help="EXTERNAL environment: fail if the worker pool's test worker does not connect "
            "within this many seconds (0: do not check)",
        )


def check_worker_pool(address: str, *, timeout_s: float) -> None:
    """Asks the pool at `address` for one SDK worker and waits for it to connect.

    Args:
      address: the pool's ``HOST:PORT`` (``--environment_config``).
      timeout_s: how long the worker may take to start and connect (0: no check).

    Raises:
      RunnerError: the pool does not answer, refuses, or its worker does not connect in time.
    """
    if timeout_s <= 0:
        return
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

    try:
        host, port = host_port(address, 0)
    except ValueError as e:
        raise RunnerError(f"--environment_config: {e}") from None
    connected = threading.Event()
    worker_id = f"audiorecords-check-{uuid.uuid4().hex[:8]}"
    server = grpc.server(_executor())
    beam_fn_api_pb2_grpc.add_BeamFnControlServicer_to_server(_Control(connected), server)
    bind, advertised = _control_host(host)
    control_port = server.add_insecure_port(f"{bind}:0")
    server.start()
    channel = grpc.insecure_channel(f"{host}:{port}")
    stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
    pool = f"the worker pool at {host}:{port} (python -m runners.worker_pool)"
    try:
        request = beam_fn_api_pb2.StartWorkerRequest(
            worker_id=worker_id,
            control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=f"{advertised}:{control_port}"),
        )
        try:
            response = stub.StartWorker(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise RunnerError(f"{pool} did not answer: {e.code().name}") from None
        if response.error:
            last = response.error.strip().splitlines()[-1]
            raise RunnerError(f"{pool} could not start an SDK worker: {last}")
        if not connected.wait(timeout_s):
            raise RunnerError(
                f"no SDK worker from {pool} connected within {timeout_s:g} s: its workers fail "
                "at start or cannot reach this machine; see the pool's output "
                "(--worker_start_timeout_s 0 skips this check)"
            )
        try:
            stub.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id=worker_id), timeout=10)
        except grpc.RpcError:
            pass  # the worker ends by itself: its control stream is closed
    finally:
        channel.close()
        server.stop(0)


class _Control:
    """A control service that only notes a worker's connection, then ends its stream."""

    def __init__(self, connected: threading.Event) -> None:
        self._connected = connected

    def Control(self, request_iterator, context):  # noqa: N802 (gRPC name)
        del request_iterator, context
        self._connected.set()
        return iter(())

    def GetProcessBundleDescriptor(self, request, context):  # noqa: N802 (gRPC name)
        del request
        context.abort(12, "not a runner")  # 12: UNIMPLEMENTED


def _control_host(pool_host: str) -> tuple[str, str]:
    """(address to listen on, address the pool's worker dials) for a pool on `pool_host`."""
    try:
        loopback = pool_host == "localhost" or ipaddress.ip_address(pool_host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return "127.0.0.1", "127.0.0.1"
    return "[::]", socket.getfqdn()


def _executor():
    from concurrent import futures

    return futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="worker-check")
