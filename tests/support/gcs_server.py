"""A real GCS server on 127.0.0.1 for the gs:// tests, reachable by both clients the job uses.

The server is fsouza/fake-gcs-server (`FAKE_GCS_MODULE`, a Go program: GCS's JSON and XML APIs,
objects in memory), built on first use by `fake_gcs_binary` with ``go install`` from the Go module
proxy (Go is on the machine; ~1-3 min once, then cached under the repository's ``.cache/``).

- Beam's gs:// file system (google-cloud-storage) honours ``STORAGE_EMULATOR_HOST``.
- TensorFlow's GCS file system reaches it through `tests.support.tls_proxy.TlsProxy` (its
  endpoints are compiled in; libcurl honours ``https_proxy`` and ``CURL_CA_BUNDLE``).
  ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` gives TF a token without any OAuth request;
  ``NO_GCE_CHECK`` keeps both clients off the metadata server.
- Beam's client gets the same token as Application Default Credentials
  (``GOOGLE_APPLICATION_CREDENTIALS``, `make_adc_file`): without any, Beam's credential lookup
  (``apache_beam.internal.gcp.auth``) takes "none found" for a transient failure and retries it
  4 times, sleeping 2, 4, 8 and 16 s less up to half (15-30 s), in every process that opens a
  gs:// path (``--no_auth`` notwithstanding) before it connects anonymously.
- Beam's client reaches it through `BatchShim` (JSON-API batches, which the server mishandles).

`GcsServer.env` is what a process needs to use the server: the tests run the record job and the
readers in subprocesses with it, so no test process's TensorFlow or Beam clients are redirected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email
import fcntl
import http.client
import http.server
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support.local_server import server_process
from tests.support.tls_proxy import (
    TF_GCS_HOSTS,
    UNAVAILABLE,
    FaultPlan,
    TlsProxy,
    make_tls_files,
)

FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server@v1.56.1"
BUILD_TIMEOUT_S = 20 * 60
ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = ROOT / ".cache" / "fake-gcs-server-v1.56.1"  # .gitignore'd


def fake_gcs_binary(cache_dir: Path = CACHE_DIR) -> Path:
    """The fake-gcs-server executable, built with ``go install`` the first time."""
    binary = cache_dir / "fake-gcs-server"
    cache_dir.mkdir(parents=True, exist_ok=True)
    # one build at a time (parallel test workers), and the binary looked for only under the lock:
    # the others wait, then find it whole (`go install` may copy it into place)
    with open(cache_dir / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        env = {**os.environ, "GOBIN": str(cache_dir), "GOFLAGS": "-buildvcs=false"}
        done = subprocess.run(
            ["go", "install", FAKE_GCS_MODULE],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    if done.returncode or not binary.exists():
        raise RuntimeError(f"go install {FAKE_GCS_MODULE} failed:\n{done.stderr[-3000:]}")
    return binary


class _QuietServer(http.server.ThreadingHTTPServer):
    """A threaded HTTP server that does not print a client gone mid-connection (a killed run's
    keep-alive connection reset while its handler waits for the next request); any other error
    is printed as the standard library does."""

    def handle_error(self, request: object, client_address: tuple) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class BatchShim:
    """An HTTP front for Beam's client (google-cloud-storage, which `replay.storage` reads gs://
    byte ranges with too): passes every request on to the server, except JSON-API batches
    (``POST /batch/storage/v1``, with which Beam renames and deletes), which it runs one
    sub-request at a time and answers as GCS does. fake-gcs-server skips sub-requests without a
    Content-ID header, which this client does not send, and so
    answered every batch with an empty one ("Bad response: not multi-part").

    `faults` (`FaultPlan`) injects its faults here, keeps the ``Range`` header of each request
    passed on and counts the bytes of every answer sent (heads included), as the TLS front does
    for TensorFlow's client."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        shim = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.command == "POST" and self.path.split("?")[0] == "/batch/storage/v1":
                    shim.faults.wait()  # one round trip; no fault inside a batch
                    status, headers, data = shim.batch(self.headers["Content-Type"], body)
                elif fault := shim.faults.fire():
                    if fault == "reset":  # no answer: RST, the client sees "connection reset"
                        self.close_connection = True
                        linger = struct.pack("ii", 1, 0)
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                        return
                    status, headers, data = 503, [("Content-Type", "application/json")], UNAVAILABLE
                else:
                    headers_in = dict(self.headers.items())
                    status, headers, data = shim.forward(self.command, self.path, headers_in, body)
                    shim.faults.note(ranged=self.headers.get("Range", ""))
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                head = sum(len(line) for line in self._headers_buffer)
                self.end_headers()
                shim.faults.note(served=head + (len(data) if self.command != "HEAD" else 0))
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        self.upstream = upstream
        self.faults = FaultPlan()
        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def batch(self, content_type: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        message = email.message_from_bytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        boundary = f"batch-{uuid.uuid4().hex}"
        out = []
        for i, part in enumerate(message.get_payload()):
            text = part.get_payload(decode=False).replace("\r\n", "\n")
            head, _, sub_body = text.partition("\n\n")
            request_line, *header_lines = head.split("\n")
            method, uri = request_line.split(" ")[:2]
            url = urllib.parse.urlsplit(uri)
            path = url.path + (f"?{url.query}" if url.query else "")
            headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
            data = sub_body.encode()
            if data:
                headers["Content-Length"] = str(len(data))
            status, res_headers, res_body = self.forward(method, path, headers, data)
            kind = dict((k.lower(), v) for k, v in res_headers).get("content-type", "text/plain")
            out.append(
                f"--{boundary}\r\nContent-Type: application/http\r\n"
                f"Content-ID: <response-{i}>\r\n\r\n"
                f"HTTP/1.1 {status} {http.client.responses.get(status, '')}\r\n"
                f"Content-Type: {kind}\r\n\r\n".encode()
                + res_body
                + b"\r\n"
            )
        out.append(f"--{boundary}--\r\n".encode())
        return 200, [("Content-Type", f"multipart/mixed; boundary={boundary}")], b"".join(out)


TEST_TOKEN = "audiorecords-test-token"  # what both clients send; the server takes any


def make_adc_file(directory: Path) -> Path:
    """An Application Default Credentials file (google-auth's ``authorized_user`` type, as
    ``Credentials.to_json`` writes it) holding `TEST_TOKEN` as an access token valid until 2999:
    google-auth loads it at once and never refreshes it (a refresh would go to Google's token
    endpoint, which the TLS proxy refuses and lists: the tests would see it)."""
    path = directory / "adc.json"
    info = {
        "type": "authorized_user",
        "client_id": "audiorecords-test",
        "client_secret": "unused",
        "refresh_token": "unused",
        "token": TEST_TOKEN,
        "expiry": "2999-12-31T00:00:00Z",
    }
    path.write_text(json.dumps(info))
    return path


@dataclasses.dataclass(frozen=True)
class GcsServer:
    """A running fake-gcs-server and the proxy in front of it."""

    endpoint: str  # http://127.0.0.1:<port>: fake-gcs-server
    beam_endpoint: str  # http://127.0.0.1:<port>: the `BatchShim` in front of it
    proxy: str  # http://127.0.0.1:<port>: `TlsProxy`, TensorFlow's way in
    ca_file: Path
    adc_file: Path  # `make_adc_file`: Beam's client's credentials
    refused: list[str]  # CONNECTs the proxy refused (any host but TF_GCS_HOSTS), as they come
    beam_faults: FaultPlan  # transient 503s injected into what Beam's client sends
    tf_faults: FaultPlan  # ... and into what TensorFlow's sends

    def env(self) -> dict[str, str]:
        """Environment for a process whose Beam and TensorFlow clients use this server."""
        return {
            "STORAGE_EMULATOR_HOST": self.beam_endpoint,
            "https_proxy": self.proxy,
            "HTTPS_PROXY": self.proxy,
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
            "CURL_CA_BUNDLE": str(self.ca_file),
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": TEST_TOKEN,
            "GOOGLE_APPLICATION_CREDENTIALS": str(self.adc_file),
            "NO_GCE_CHECK": "true",
            "GCE_METADATA_HOST": "127.0.0.1:9",  # nothing listens: no metadata server
            "GOOGLE_CLOUD_PROJECT": "audiorecords-test",
        }

    def _request(self, method: str, path: str, body: bytes = b"", **query: str) -> bytes:
        url = f"{self.endpoint}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, data=body or None, method=method)
        request.add_header("Content-Type", "application/json" if path.endswith("/b") else
                           "application/octet-stream")  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def create_bucket(self, bucket: str) -> None:
        body = json.dumps({"name": bucket}).encode()
        self._request("POST", "/storage/v1/b", body, project="audiorecords-test")

    def upload_tree(self, local_dir: Path, bucket: str, prefix: str) -> list[str]:
        """Every file under `local_dir` to ``gs://bucket/prefix/<relative path>``; the URLs."""
        urls = []
        for path in sorted(p for p in Path(local_dir).rglob("*") if p.is_file()):
            name = f"{prefix}/{path.relative_to(local_dir).as_posix()}"
            path_ = f"/upload/storage/v1/b/{bucket}/o"
            self._request("POST", path_, path.read_bytes(), uploadType="media", name=name)
            urls.append(f"gs://{bucket}/{name}")
        return urls

    def upload_bytes(self, bucket: str, name: str, data: bytes) -> None:
        self._request(
            "POST", f"/upload/storage/v1/b/{bucket}/o", data, uploadType="media", name=name
        )

    def read_object(self, bucket: str, name: str) -> bytes:
        quoted = urllib.parse.quote(name, safe="")
        return self._request("GET", f"/storage/v1/b/{bucket}/o/{quoted}", alt="media")

    def list_names(self, bucket: str, prefix: str = "") -> list[str]:
        """Names of the objects under `prefix` (all pages)."""
        names, token = [], None
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            page = json.loads(self._request("GET", f"/storage/v1/b/{bucket}/o", **query))
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return sorted(names)


@contextlib.contextmanager
def running_gcs_server(directory: Path) -> Iterator[GcsServer]:
    """Builds (once) and starts fake-gcs-server and its TLS proxy; stops both on exit."""
    binary = fake_gcs_binary()
    ca, cert, key = make_tls_files(directory)

    def command(port: int) -> list[str]:
        cmd = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
        return [*cmd, "-backend", "memory", "-public-host", TF_GCS_HOSTS[1], "-log-level", "error"]

    with server_process(command, "fake-gcs-server") as port:
        proxy = TlsProxy(("127.0.0.1", port), cert, key)
        shim = BatchShim(("127.0.0.1", port))
        try:
            yield GcsServer(
                endpoint=f"http://127.0.0.1:{port}",
                beam_endpoint=f"http://127.0.0.1:{shim.port}",
                proxy=f"http://127.0.0.1:{proxy.port}",
                ca_file=ca,
                adc_file=make_adc_file(directory),
                refused=proxy.refused,
                beam_faults=shim.faults,
                tf_faults=proxy.faults,
            )
        finally:
            proxy.close()
            shim.close()
