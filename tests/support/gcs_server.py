"""A real GCS server on 127.0.0.1 for the gs:// tests, reachable by both clients the job uses.

The server is fsouza/fake-gcs-server (`FAKE_GCS_MODULE`, a Go program: GCS's JSON and XML APIs,
objects in memory), built on first use by `fake_gcs_binary` with ``go install`` from the Go module
proxy (Go is on the machine; ~1-3 min once, then cached under the repository's ``.cache/``).

- Beam's gs:// file system (google-cloud-storage) honours ``STORAGE_EMULATOR_HOST``.
- TensorFlow's GCS file system has its endpoints compiled in (``https://www.googleapis.com``,
  ``https://storage.googleapis.com``) and no endpoint variable, but goes through libcurl, which
  honours ``https_proxy`` and ``CURL_CA_BUNDLE``. So `TlsProxy` is a CONNECT proxy on 127.0.0.1
  that accepts only those two hosts, ends TLS with a certificate for them signed by a test CA
  made here (`make_tls_files`), and passes the requests on to the server unchanged (its Host
  header tells the JSON API from the XML one). ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` gives TF a token
  without any OAuth request; ``NO_GCE_CHECK`` keeps both clients off the metadata server.

`GcsServer.env` is what a process needs to use the server: the tests run the record job and the
readers in subprocesses with it, so no test process's TensorFlow or Beam clients are redirected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import email
import http.client
import http.server
import json
import os
import select
import socket
import ssl
import subprocess
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support.local_server import server_process

FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server@v1.56.1"
TF_GCS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")  # TF's compiled-in endpoints
BUILD_TIMEOUT_S = 20 * 60
ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = ROOT / ".cache" / "fake-gcs-server-v1.56.1"  # .gitignore'd


def fake_gcs_binary(cache_dir: Path = CACHE_DIR) -> Path:
    """The fake-gcs-server executable, built with ``go install`` the first time."""
    binary = cache_dir / "fake-gcs-server"
    if binary.exists():
        return binary
    cache_dir.mkdir(parents=True, exist_ok=True)
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


def make_tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) PEM files: the server's certificate
    names `TF_GCS_HOSTS` and is signed by the CA, which only these tests trust."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "audiorecords test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TF_GCS_HOSTS[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in TF_GCS_HOSTS]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


class FaultPlan:
    """Transient failures a front injects: every `every`-th request it would pass on is answered
    ``503 Service Unavailable`` instead (0: none); `injected` counts them."""

    def __init__(self) -> None:
        self.every = 0
        self.seen = 0
        self.injected = 0
        self._lock = threading.Lock()

    def fire(self) -> bool:
        with self._lock:
            if not self.every:
                return False
            self.seen += 1
            if self.seen % self.every:
                return False
            self.injected += 1
            return True


UNAVAILABLE = b'{"error": {"code": 503, "message": "injected by the test front"}}'


class TlsProxy:
    """A CONNECT proxy on 127.0.0.1: TLS for `TF_GCS_HOSTS` ends here, the bytes go on to
    `upstream` (host, port) in plain HTTP; any other host is refused (403)."""

    def __init__(self, upstream: tuple[str, int], cert: Path, key: Path) -> None:
        self.upstream = upstream
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.refused: list[str] = []
        self.faults = FaultPlan()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target = head.split(b"\r\n", 1)[0].decode("latin-1").split()[:2]
            host = target.rsplit(":", 1)[0]
            if method != "CONNECT" or host not in TF_GCS_HOSTS:
                self.refused.append(f"{method} {target}")
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                tls = self.context.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                return
            with contextlib.closing(tls), socket.create_connection(self.upstream) as up:
                _pump(tls, up, self.faults)


class _RequestFixer:
    """The client's request stream, with TensorFlow's ``Transfer-Encoding: identity`` header
    dropped: Go's net/http (the emulator's server) answers it with 501 "Unsupported transfer
    encoding" where Google's front ends accept it. "identity" means no encoding, so dropping it
    changes nothing else; bodies are passed on by their Content-Length, untouched. A request
    `faults` picks is not passed on: `feed` returns a 503 for the client instead (and drops its
    body; TF sends one request at a time, so the reply cannot overtake another)."""

    def __init__(self, faults: FaultPlan) -> None:
        self.buffer = b""
        self.body_left = 0
        self.dropping = False
        self.faults = faults

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(bytes for the server, bytes for the client) of the next chunk of requests."""
        self.buffer += data
        out, replies = [], []
        while self.buffer:
            if self.body_left:
                take = self.buffer[: self.body_left]
                self.buffer = self.buffer[len(take) :]
                self.body_left -= len(take)
                if not self.dropping:
                    out.append(take)
                continue
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head, self.buffer = self.buffer[: end + 4], self.buffer[end + 4 :]
            lines = head.split(b"\r\n")
            kept = [
                ln for ln in lines if ln.lower().replace(b" ", b"") != b"transfer-encoding:identity"
            ]
            for line in kept:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    self.body_left = int(value.strip() or 0)
            self.dropping = self.faults.fire()
            if self.dropping:
                replies.append(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(UNAVAILABLE)}\r\n\r\n".encode()
                    + UNAVAILABLE
                )
            else:
                out.append(b"\r\n".join(kept))
        return b"".join(out), b"".join(replies)


def _pump(a: ssl.SSLSocket, b: socket.socket, faults: FaultPlan) -> None:
    """Copies bytes both ways until either side closes (requests through `_RequestFixer`)."""
    fixer = _RequestFixer(faults)
    while True:
        ready = [a] if a.pending() else select.select([a, b], [], [], 60)[0]
        if not ready:
            return
        for src in (a, b):
            if src in ready:
                try:
                    data = src.recv(1 << 16)
                except (OSError, ssl.SSLError):
                    return
                if not data:
                    return
                if src is b:
                    a.sendall(_https_location(data))
                    continue
                to_server, to_client = fixer.feed(data)
                if to_server:
                    b.sendall(to_server)
                if to_client:
                    a.sendall(to_client)


def _https_location(data: bytes) -> bytes:
    """A response's ``Location: http://<TF host>/...`` (the upload session fake-gcs-server names
    from the Host header, in its own scheme) as the ``https://`` URL the client came by: TF then
    sends the upload through this proxy too. Only in the head of a response that starts this
    chunk: TF waits for each response before its next request, so a response starts a read."""
    if not data.startswith(b"HTTP/1."):
        return data
    head, sep, body = data.partition(b"\r\n\r\n")
    for host in TF_GCS_HOSTS:
        head = head.replace(
            b"\r\nLocation: http://" + host.encode(), b"\r\nLocation: https://" + host.encode()
        )
    return head + sep + body


class BatchShim:
    """An HTTP front for Beam's client (google-cloud-storage): passes every request on to the
    server, except JSON-API batches (``POST /batch/storage/v1``, with which Beam renames and
    deletes), which it runs one sub-request at a time and answers as GCS does. fake-gcs-server
    skips sub-requests without a Content-ID header, which this client does not send, and so
    answered every batch with an empty one ("Bad response: not multi-part")."""

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
                    status, headers, data = shim.batch(self.headers["Content-Type"], body)
                elif shim.faults.fire():
                    status, headers, data = 503, [("Content-Type", "application/json")], UNAVAILABLE
                else:
                    headers_in = dict(self.headers.items())
                    status, headers, data = shim.forward(self.command, self.path, headers_in, body)
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        self.upstream = upstream
        self.faults = FaultPlan()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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


@dataclasses.dataclass(frozen=True)
class GcsServer:
    """A running fake-gcs-server and the proxy in front of it."""

    endpoint: str  # http://127.0.0.1:<port>: fake-gcs-server
    beam_endpoint: str  # http://127.0.0.1:<port>: the `BatchShim` in front of it
    proxy: str  # http://127.0.0.1:<port>: `TlsProxy`, TensorFlow's way in
    ca_file: Path
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
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "audiorecords-test-token",
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
                refused=proxy.refused,
                beam_faults=shim.faults,
                tf_faults=proxy.faults,
            )
        finally:
            proxy.close()
            shim.close()
