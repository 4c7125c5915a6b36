"""A real S3 server on 127.0.0.1 for the s3:// tests.

moto's server (``python -m moto.server``: S3's REST API over HTTP, buckets in its memory),
installed by the README's test command (requirements.txt), run in a process of its own: the
record job reaches it through Beam's s3:// file system (boto3) exactly as it would reach AWS,
given ``--s3_endpoint_url`` and credentials, which `S3Server.beam_args` spells out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.local_server import server_process

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


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """Starts the server, waits until it accepts connections, stops it on exit."""

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]

    with server_process(command, "moto.server") as port:
        yield S3Server(endpoint=f"http://127.0.0.1:{port}")
