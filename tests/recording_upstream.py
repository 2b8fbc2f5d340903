"""A TLS upstream that records, byte for byte, what a proxy writes into its connections.

It stands where the SuperLink would (same certificate, so the proxy's upstream check holds)
and answers every request it can frame ``200`` with an empty protobuf body. Each request is
recorded as soon as its head is complete, before its body, so a request line the proxy
should never have written is seen even if the rest never comes. Bytes it cannot frame as
HTTP/1.1 (a ``Transfer-Encoding`` body, a bad Content-Length, a head over 1 MiB) are
recorded as ``errors``, and the connection is closed.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/protobuf\r\nContent-Length: 0\r\n\r\n"
MAX_HEAD = 1 << 20


@dataclass
class Seen:
    line: bytes  # the request line, without its CRLF
    headers: list[tuple[bytes, bytes]]  # (lower-cased name, value) in order
    body: bytearray = field(default_factory=bytearray)

    def header(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.headers if k == name]


class RecordingUpstream:
    def __init__(self, cert: Path, key: Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.seen: list[Seen] = []
        self.raw: list[bytearray] = []  # everything each connection carried
        self.errors: list[str] = []
        self.framed = 0  # bytes consumed as request heads and bodies, of all connections
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, plain: socket.socket) -> None:
        raw = bytearray()
        with self.lock:
            self.raw.append(raw)
        try:
            conn = self.ctx.wrap_socket(plain, server_side=True)
        except (OSError, ssl.SSLError) as e:
            with self.lock:
                self.errors.append(f"TLS handshake: {e}")
            plain.close()
            return
        buf = bytearray()
        pending: list[tuple[Seen, int]] = []  # a request whose head is recorded, with its body size
        with conn:
            while True:
                try:
                    data = conn.recv(1 << 16)
                except (OSError, ssl.SSLError):
                    return
                if not data:
                    if buf or pending:
                        self._error(f"connection closed mid-request with {len(buf)} bytes: {bytes(buf[:200])!r}")
                    return
                raw += data
                buf += data
                if not self._drain(conn, buf, pending):
                    return

    def _error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)

    def _drain(self, conn: ssl.SSLSocket, buf: bytearray, pending: list[tuple[Seen, int]]) -> bool:
        """Frame and answer every complete request in ``buf``; False: stop reading this connection."""
        while True:
            if not pending:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        self._error(f"no end of head in {len(buf)} bytes: {bytes(buf[:200])!r}")
                        return False
                    return True
                line, *rest = bytes(buf[:end]).split(b"\r\n")
                del buf[: end + 4]
                self.framed += end + 4
                headers = [(k.strip().lower(), v.strip()) for k, _, v in (h.partition(b":") for h in rest)]
                seen = Seen(line, headers)
                with self.lock:
                    self.seen.append(seen)
                if seen.header(b"transfer-encoding"):
                    self._error(f"Transfer-Encoding reached the upstream: {line!r}")
                    return False
                lengths = seen.header(b"content-length")
                if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
                    self._error(f"Content-Length {lengths!r} reached the upstream: {line!r}")
                    return False
                pending.append((seen, int(lengths[0]) if lengths else 0))
            seen, size = pending[0]
            if len(buf) < size:
                return True  # head recorded; wait for the body
            seen.body += buf[:size]
            del buf[:size]
            self.framed += size
            pending.clear()
            with contextlib.suppress(OSError):
                conn.sendall(OK)
