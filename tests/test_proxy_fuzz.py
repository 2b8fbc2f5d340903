"""The real nginx proxy, started by `fedapp deploy proxy` (nginx.conf from fedapp/deploy/proxy.py)
with certificates from fedapp/deploy/certs.py, in front of an upstream that records every byte it receives
(tests/recording_upstream.py). Flower's own HTTP Fleet client calls every route through it,
then 3,220 generated raw requests (tests/proxy_cases.py) try every path, encoding, method,
version, header and framing trick. The upstream must receive exactly the allowed requests,
each with a request line that is byte for byte ``POST <Fleet route> HTTP/1.1``, and nothing
for the rest. A real SuperNode joining and training through the proxy is tests/test_deploy.py.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import subprocess
import sys
import time
import typing
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
from flwr.supercore.primitives.asymmetric import generate_key_pairs
from flwr.supercore.protobuf.client import ProtobufCall, ProtobufRequestContext
from flwr.supernode.fleet_http_client import FleetHttpClient
from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

from fedapp.deploy.certs import make_certs
from fedapp.deploy.proxy import FLEET_ROUTES
from tests.deploy_harness import stop_group
from tests.flwr_harness import ROOT, free_port
from tests.proxy_cases import ROUTES, cases
from tests.recording_upstream import RecordingUpstream

ALLOWED = {f"POST {r} HTTP/1.1".encode() for r in ROUTES}


@dataclass
class Proxy:
    port: int
    upstream: RecordingUpstream
    ca: Path
    log: Path

    def refusals(self) -> list[str]:
        return [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.startswith("fedapp-proxy refused ")]

    def send(self, raw: bytes, timeout: float = 5.0) -> bytes:
        """``raw`` over one TLS connection; everything the proxy answers until it closes."""
        ctx = ssl.create_default_context(cafile=self.ca)
        out = bytearray()
        plain = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        with ctx.wrap_socket(plain, server_hostname="localhost") as conn:
            with contextlib.suppress(OSError):
                conn.sendall(raw)
            with contextlib.suppress(OSError):
                while chunk := conn.recv(1 << 16):
                    out += chunk
        return bytes(out)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("proxy")
    tls = make_certs(["127.0.0.1"], tmp / "tls")
    upstream = RecordingUpstream(tls.server_cert, tls.server_key)
    port, log = free_port(), tmp / "proxy.log"
    # `fedapp deploy proxy`, as an operator runs it: it writes nginx.conf (refusals to the stderr it shares with nginx)
    argv = [sys.executable, "-m", "fedapp", "deploy", "proxy", "--tls", str(tls.ca_cert.parent), "--upstream", f"127.0.0.1:{upstream.port}"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--proxy-dir", str(tmp / "nginx"), "--no-restart"]
    with log.open("ab") as fh:
        nginx = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert nginx.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield Proxy(port, upstream, tls.ca_cert, log)
    finally:
        stop_group(nginx)
        upstream.close()


class SentHeaders:
    """Last interceptor before the transport: the headers Flower's client puts on each request."""

    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []

    def intercept(self, context: ProtobufRequestContext, call_next: ProtobufCall) -> httpx.Response:
        self.sent.append(context.request)
        return call_next(context)


def test_the_allowlist_is_every_route_flowers_fleet_client_calls() -> None:
    assert len(ROUTES) == 12 and set(FLEET_ROUTES) == set(ROUTES)


def test_flowers_fleet_client_reaches_every_route_unchanged(proxy: Proxy) -> None:
    """FleetHttpClient with the SuperNode's interceptors (flwr/supernode/fleet_http_connection.py)
    calls each of its methods through the proxy: the upstream gets each request line, body and
    Flower header exactly as the client sent them."""
    private, public = generate_key_pairs()
    sent = SentHeaders()
    interceptors = [RuntimeVersionHttpInterceptor(component_name="SuperNode"), NodeAuthHttpInterceptor(private, public), sent]
    before = proxy.upstream.count()
    methods = [m for m in dir(FleetHttpClient) if m[0].isupper()]
    with FleetHttpClient.from_server_address(f"127.0.0.1:{proxy.port}", False, proxy.ca.read_bytes(), interceptors) as client:  # type: ignore[arg-type]
        for name in methods:
            method = getattr(client, name)
            message = typing.get_type_hints(method)["request"]()
            method(message)
    got = proxy.upstream.seen[before:]
    assert len(methods) == len(ROUTES) == len(got)
    for request, seen in zip(sent.sent, got, strict=True):
        assert seen.line == f"POST {request.url.raw_path.decode()} HTTP/1.1".encode()
        assert seen.line in ALLOWED
        assert bytes(seen.body) == request.content
        for name, value in request.headers.items():
            if name.startswith("flwr-") or name in ("content-type", "accept", "user-agent"):
                assert seen.header(name.encode()) == [value.encode()], name
        assert seen.header(b"content-length") == [str(len(request.content)).encode()]
    assert not proxy.upstream.errors


def test_generated_requests_reach_the_upstream_only_as_allowed_fleet_routes(proxy: Proxy) -> None:
    generated = cases(proxy.port)
    start, logged = proxy.upstream.count(), len(proxy.refusals())
    refused, wrong, statuses = Counter[str](), [], Counter[str]()
    for case in generated:
        before = proxy.upstream.count()
        answer = proxy.send(case.raw)
        got = [(s.line, bytes(s.body)) for s in proxy.upstream.seen[before:]]
        codes = re.findall(rb"^HTTP/1\.[01] (\d{3})", answer, re.M)
        statuses.update(c.decode() for c in codes)
        # a refusal is 4xx/5xx (505 for HTTP/2.0); an HTTP/0.9 request gets the refusal's body, no status line
        refused_ok = case.forwards or all(c[:1] in (b"4", b"5") for c in codes)
        if got != list(case.forwards) or not refused_ok:
            wrong.append((case.family, case.raw[:300], got, codes))
        refused[case.family] += not case.forwards
    time.sleep(0.5)  # anything forwarded late would show up now
    seen = proxy.upstream.seen[start:]
    expected = sum(len(c.forwards) for c in generated)
    n_refused = sum(refused.values())
    print(f"\nproxy fuzz: {len(generated)} raw requests tried, {n_refused} refused {dict(+refused)}")
    print(f"{len(generated) - n_refused} well-formed forwarded; upstream got {len(seen)} requests; statuses {dict(statuses)}")
    print(f"cases answered otherwise: {Counter(w[0] for w in wrong)}")
    print(f"upstream request lines not allowed: {sum(s.line not in ALLOWED for s in seen)}")
    n_logged = len(proxy.refusals()) - logged
    print(f"refusals logged: {n_logged} (the requests pipelined behind a forwarded one too)")
    assert not wrong, f"{len(wrong)} cases: " + "\n".join(map(repr, wrong[:20]))
    assert len(seen) == expected and {s.line for s in seen} <= ALLOWED
    assert not proxy.upstream.errors, proxy.upstream.errors[:5]
    for s in seen:  # nginx's own framing upstream: one length, no chunking or upgrade
        assert s.header(b"content-length") == [str(len(s.body)).encode()] and not s.header(b"upgrade") and not s.header(b"expect")
    # every byte the upstream connections carried was part of those requests, nothing between them
    assert sum(len(r) for r in proxy.upstream.raw) == proxy.upstream.framed
    assert n_logged >= n_refused


def test_refusals_are_logged_with_the_escaped_request_line(proxy: Proxy) -> None:
    attack = b"POST /v1/fleet/get-run%20HTTP/1.1%0d%0aHost:%20x%0d%0a%0d%0aPOST%20/v1/control/list-nodes%20HTTP/1.1 HTTP/1.1"
    answer = proxy.send(
        attack + b"\r\nHost: 127.0.0.1\r\nContent-Type: application/protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert f'fedapp-proxy refused 127.0.0.1 "{attack.decode()}" 403' in proxy.refusals()
    nul = b"POST /v1/fleet/get-run\x00 HTTP/1.1"
    assert proxy.send(nul + b"\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert 'fedapp-proxy refused 127.0.0.1 "POST /v1/fleet/get-run\\x00 HTTP/1.1" 400' in proxy.refusals()


def test_refusals_go_to_a_file_when_stderr_cannot_be_shared(tmp_path: Path) -> None:
    """Under systemd's journal stderr is a socket, which open("/dev/stderr") refuses (nginx would
    not start); on a file opened without append, nginx's lines and the others' would overwrite."""
    code = "import sys; from fedapp.deploy.proxy import refusal_log; print(refusal_log(sys.argv[1]))"
    argv = [sys.executable, "-c", code, str(tmp_path)]
    fallback = str(tmp_path.resolve() / "refused.log")
    left, right = socket.socketpair()
    with left, right:
        assert subprocess.run(argv, stderr=right.fileno(), stdout=subprocess.PIPE, text=True).stdout.strip() == fallback
    for mode, expected in (("wb", fallback), ("ab", "/dev/stderr")):
        with (tmp_path / f"stderr-{mode}").open(mode) as err:
            assert subprocess.run(argv, stderr=err, stdout=subprocess.PIPE, text=True).stdout.strip() == expected, mode
    assert subprocess.run(argv, capture_output=True, text=True).stdout.strip() == "/dev/stderr"  # a pipe
