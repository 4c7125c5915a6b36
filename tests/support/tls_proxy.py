"""The TLS front TensorFlow's GCS client needs to reach a local GCS server (`gcs_server`).

TensorFlow's GCS file system has its endpoints compiled in (`TF_GCS_HOSTS`) and no endpoint
variable, but goes through libcurl, which honours ``https_proxy`` and ``CURL_CA_BUNDLE``: `TlsProxy`
is a CONNECT proxy on 127.0.0.1 that accepts only those hosts, ends TLS with a certificate for
them signed by a test CA made here (`make_tls_files`), and passes the requests on to the server
(their Host header tells the JSON API from the XML one). `FaultPlan` makes a front answer some
requests 503, or drop their connection, as GCS and the network between do now and then.
"""

from __future__ import annotations

import contextlib
import datetime
import select
import socket
import ssl
import struct
import threading
import time
import urllib.parse
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
    ``503 Service Unavailable`` instead (0: none), or, with `resets`, every other such request
    has its connection reset without an answer. `injected` counts both, `reset` the resets.
    `latency_s` is added before every request (an object store's round trip, for measuring what
    grows with the number of requests); `requests` counts every request the front handled.
    Both fronts (this TLS one and `gcs_server.BatchShim`) also keep the ``Range`` header of
    every request they pass on that has one (`ranges`, ``"bytes=a-b"``) and count the bytes of
    the answers (`served`, heads included): what a reader asked for, and what it was sent.

    A resumable upload whose data request a fault swallowed is remembered (`lost_uploads`): the
    client then asks the server how much it holds (``Content-Range: bytes */<size>``), to which
    GCS answers ``308 Resume Incomplete`` with no ``Range`` (nothing persisted) and the client
    sends the data again; fake-gcs-server instead finalises the object with the bytes it has
    (none: a 0-byte object, silently). The TLS front answers such a query itself, as GCS does."""

    def __init__(self) -> None:
        self.every = 0
        self.resets = False
        self.latency_s = 0.0  # added before each request is passed on (an object store's ~40 ms)
        self.requests = 0  # every request the front was asked to pass on
        self.seen = 0
        self.injected = 0
        self.reset = 0
        self.ranges: list[str] = []
        self.served = 0
        self.lost_uploads: set[str] = set()
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Counts a request and waits `latency_s` (a request no fault is injected into)."""
        with self._lock:
            self.requests += 1
            latency = self.latency_s
        if latency:
            time.sleep(latency)

    def note(self, *, ranged: str = "", served: int = 0) -> None:
        """Keeps a request's ``Range`` header (`ranges`) and counts `served` answer bytes."""
        with self._lock:
            if ranged:
                self.ranges.append(ranged)
            self.served += served

    def fire(self) -> str:
        """ "" (pass the request on), "503" or "reset", after `wait`."""
        self.wait()
        with self._lock:
            if not self.every:
                return ""
            self.seen += 1
            if self.seen % self.every:
                return ""
            self.injected += 1
            if self.resets and self.injected % 2 == 0:
                self.reset += 1
                return "reset"
            return "503"


UNAVAILABLE = b'{"error": {"code": 503, "message": "injected by the test front"}}'
SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(UNAVAILABLE)}\r\n\r\n".encode()
    + UNAVAILABLE
)
RESUME_INCOMPLETE = b"HTTP/1.1 308 Resume Incomplete\r\nContent-Length: 0\r\n\r\n"


class ConnectionDropped(Exception):
    """A fault: the front closes the client's connection (after `reply`, if any; `reset`: RST)."""

    def __init__(self, reply: bytes = b"", reset: bool = False) -> None:
        super().__init__("dropped by the test front")
        self.reply = reply
        self.reset = reset


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
        with contextlib.suppress(OSError):  # wakes an accept() `_serve` waits in (close may not)
            self.server.shutdown(socket.SHUT_RDWR)
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
            _no_delay(conn)
            try:
                tls = self.context.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                return
            with contextlib.closing(tls), socket.create_connection(self.upstream) as up:
                _no_delay(up)
                _pump(tls, up, self.faults)


def _no_delay(sock: socket.socket) -> None:
    """TCP_NODELAY: a relay passes each piece on as it comes. With Nagle's algorithm a small
    write waits while an earlier one is unacknowledged, and the peer delays its ACK by up to
    40 ms: every response to the client (sent after TLS 1.3's session tickets, which the client
    does not answer) and every upload's body to the server (sent after its head) waited so,
    ~45 ms a request (a 100-byte ``tf.io.gfile`` write: 150 ms -> 16 ms, an ``exists``: 95 ms
    -> 10 ms)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _RequestFixer:
    """The client's request stream, with TensorFlow's ``Transfer-Encoding: identity`` header
    dropped: Go's net/http (the emulator's server) answers it with 501 "Unsupported transfer
    encoding" where Google's front ends accept it. "identity" means no encoding, so dropping it
    changes nothing else; bodies are passed on by their Content-Length, untouched.

    A request `faults` picks is not passed on: `feed` answers it 503 (``Connection: close``) or
    not at all, and the connection ends (`ConnectionDropped`): the client never waits for a
    body it will not send (libcurl's ``Expect: 100-continue``) nor sends one this front would
    have to skip. A status query of a resumable upload a fault swallowed is answered here (see
    `FaultPlan`)."""

    def __init__(self, faults: FaultPlan) -> None:
        self.buffer = b""
        self.body_left = 0  # bytes of the current body (or chunk, with its CRLF) still to pass
        self.chunked = False  # in a chunked body, between chunks
        self.faults = faults

    def feed(self, data: bytes) -> tuple[bytes, bytes, ConnectionDropped | None]:
        """(bytes for the server, bytes for the client, a fault that ends the connection).

        Bodies stream through as they come (shards are 100s of MB): by their Content-Length,
        or chunk by chunk when chunked (TF sends an upload's data chunked *and* with its
        Content-Length; chunked wins)."""
        self.buffer += data
        out, replies = [], []
        while self.buffer:
            if self.body_left:
                take = self.buffer[: self.body_left]
                self.buffer = self.buffer[len(take) :]
                self.body_left -= len(take)
                out.append(take)
                continue
            if self.chunked:  # the next chunk's size line ("0": the last; no trailers)
                eol = self.buffer.find(b"\r\n")
                if eol < 0:
                    break
                size = int(self.buffer[:eol].split(b";")[0], 16)
                out.append(self.buffer[: eol + 2])
                self.buffer = self.buffer[eol + 2 :]
                self.body_left, self.chunked = size + 2, size > 0
                continue
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            dropped = self._request(head, out, replies)
            if dropped:
                return b"".join(out), b"", dropped
        return b"".join(out), b"".join(replies), None

    def _request(self, head: bytes, out: list, replies: list) -> ConnectionDropped | None:
        """Passes a request's head on (to `out`), answers it here (to `replies`), or drops
        the connection; sets up the streaming of its body."""
        lines = head.split(b"\r\n")
        kept = [
            ln for ln in lines if ln.lower().replace(b" ", b"") != b"transfer-encoding:identity"
        ]
        fields = {}
        for line in kept[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        chunked = b"chunked" in fields.get(b"transfer-encoding", b"").lower()
        length = 0 if chunked else int(fields.get(b"content-length") or 0)
        method, target = lines[0].decode("latin-1").split()[:2]
        upload = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query).get("upload_id", [""])[
            0
        ]
        status_query = fields.get(b"content-range", b"").startswith(b"bytes */")
        if upload in self.faults.lost_uploads and status_query and not (length or chunked):
            self.faults.lost_uploads.discard(upload)
            replies.append(RESUME_INCOMPLETE)
            return None
        fault = self.faults.fire()
        if fault:
            if upload and method == "PUT" and (length or chunked):
                self.faults.lost_uploads.add(upload)
            reply = SERVICE_UNAVAILABLE if fault == "503" else b""
            return ConnectionDropped(b"".join(replies) + reply, reset=fault == "reset")
        if b"range" in fields:
            self.faults.note(ranged=fields[b"range"].decode("latin-1"))
        self.body_left, self.chunked = length, chunked
        out.append(b"\r\n".join(kept) + b"\r\n\r\n")
        return None


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
                    faults.note(served=len(data))
                    a.sendall(_https_location(data))
                    continue
                to_server, to_client, dropped = fixer.feed(data)
                if to_server:
                    b.sendall(to_server)
                if to_client:
                    a.sendall(to_client)
                if dropped:
                    if dropped.reply:
                        a.sendall(dropped.reply)
                    if dropped.reset:  # RST, not FIN: the client sees "connection reset"
                        a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return


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
