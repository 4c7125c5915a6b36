"""The TLS front TensorFlow's GCS client needs to reach a local GCS server (`gcs_server`).

TensorFlow's GCS file system has its endpoints compiled in (`TF_GCS_HOSTS`) and no endpoint
variable, but goes through libcurl, which honours ``https_proxy`` and ``CURL_CA_BUNDLE``: `TlsProxy`
is a CONNECT proxy on 127.0.0.1 that accepts only those hosts, ends TLS with a certificate for
them signed by a test CA made here (`make_tls_files`), and passes the requests on to the server
(their Host header tells the JSON API from the XML one). `FaultPlan` makes a front answer some
requests 503, as GCS does now and then.
"""

from __future__ import annotations

import contextlib
import datetime
import select
import socket
import ssl
import threading
from pathlib import Path

TF_GCS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")  # TF's compiled-in endpoints


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
