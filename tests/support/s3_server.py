"""A real S3 server on 127.0.0.1 for the s3:// tests.

moto's server (``python -m moto.server``: S3's REST API over HTTP, buckets in its memory),
installed by the README's test command (requirements.txt), run in a process of its own: the
record job reaches it through Beam's s3:// file system (boto3) exactly as it would reach AWS,
given ``--s3_endpoint_url`` and credentials, which `S3Server.beam_args` spells out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT_S = 60.0  # the server imports Flask and moto's S3 backend first
REGION = "us-east-1"
ACCESS_KEY = "audiorecords-test"  # any non-empty key: the server checks no signature
SECRET_KEY = "audiorecords-test-secret"


@dataclasses.dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint and the ways the tests talk to it."""

    endpoint: str  # http://127.0.0.1:<port>

    def beam_args(self) -> list[str]:
        """The Beam options (S3Options) that point the s3:// file system at this server."""
        return [
            f"--s3_endpoint_url={self.endpoint}",
            f"--s3_access_key_id={ACCESS_KEY}",
            f"--s3_secret_access_key={SECRET_KEY}",
            f"--s3_region_name={REGION}",
        ]

    def client(self):  # noqa: ANN201 - a boto3 S3 client
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def upload_tree(self, local_dir: Path, bucket: str, prefix: str) -> list[str]:
        """Every file under `local_dir` to ``s3://bucket/prefix/<relative path>``; the URLs."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
        urls = []
        for path in sorted(p for p in Path(local_dir).rglob("*") if p.is_file()):
            key = f"{prefix}/{path.relative_to(local_dir).as_posix()}"
            client.upload_file(str(path), bucket, key)
            urls.append(f"s3://{bucket}/{key}")
        return urls


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """Starts the server, waits until it accepts connections, stops it on exit."""
    port = _free_port()
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto.server exited: {proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"moto.server did not listen on port {port} in time")
            time.sleep(0.1)
        yield S3Server(endpoint=f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()
