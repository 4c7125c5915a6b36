"""A server process on 127.0.0.1 for the tests (the S3 and GCS servers): a free port, started,
waited for until it accepts connections, stopped on exit."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence

START_TIMEOUT_S = 60.0  # a server that imports its framework first (moto: Flask)


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(command: Callable[[int], Sequence[str]], name: str) -> Iterator[int]:
    """Runs ``command(port)`` on a free port until the block ends; yields the port once the
    server accepts connections. Raises RuntimeError (with its stderr) if it exits first or does
    not listen within `START_TIMEOUT_S`."""
    port = free_port()
    proc = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not listen on port {port} in time")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()
