"""Raw requests against the Fleet proxy, generated: each trick of the request line, the path's
encoding, the method, the version, the headers and the framing, over every Fleet route.

A case is the bytes one TLS connection carries and the requests the upstream must receive
for it, each as ``(request line, body)``: nothing for an attack; the canonical
``POST <route> HTTP/1.1`` request for a well-formed Fleet request (also one that nginx
reframes, such as bare-LF line ends or leading blank lines, since nginx writes its own
request upstream). The routes are read from flwr's own HTTP Fleet client, not from fedapp.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from itertools import product

from flwr.supernode.fleet_http_client import FleetHttpClient

ROUTES = tuple(re.findall(r'path="(/v1/fleet/[a-z-]+)"', inspect.getsource(FleetHttpClient)))
BODY = b"\x08\x07\x12\x03abc"  # a small protobuf: field 1 = 7, field 2 = "abc"
CONTROL = (b"/v1/control/list-nodes", b"/v1/control/start-run", b"/v1/control/register-node", b"/v1/runtime/acquire-task")


@dataclass(frozen=True)
class Case:
    family: str
    raw: bytes
    forwards: tuple[tuple[bytes, bytes], ...] = ()  # (request line, body) the upstream must get, in order


def line(route: bytes) -> bytes:
    return b"POST " + route + b" HTTP/1.1"


def request(
    target: bytes,
    *,
    method: bytes = b"POST",
    version: bytes = b" HTTP/1.1",
    headers: list[bytes] | None = None,
    extra: list[bytes] = (),  # type: ignore[assignment]
    body: bytes = BODY,
    close: bool = True,
    eol: bytes = b"\r\n",
) -> bytes:
    """A request as a SuperNode writes it (httpx's headers), with the parts a case changes."""
    if headers is None:
        headers = [
            b"Host: 127.0.0.1",
            b"Accept: application/protobuf",
            b"Accept-Encoding: gzip, deflate",
            b"User-Agent: python-httpx/0.28.1",
            b"Content-Length: " + str(len(body)).encode(),
            b"Content-Type: application/protobuf",
        ]
    headers = [*headers, *extra, *([b"Connection: close"] if close else [b"Connection: keep-alive"])]
    return method + b" " + target + version + eol + b"".join(h + eol for h in headers) + eol + body


def valid(route: bytes, close: bool = True) -> Case:
    return Case("valid", request(route, close=close), ((line(route), BODY),))


def pct(text: bytes, upper: bool = False) -> bytes:
    return b"".join((b"%%%02X" if upper else b"%%%02x") % c for c in text)


def path_tricks(route: bytes) -> list[bytes]:
    """Targets that nginx may normalise or decode to ``route`` (or to a Control path), none of
    which is byte for byte the route."""
    name = route.rsplit(b"/", 1)[1]
    head, tail = name[:1], name[1:]
    return [
        b"/v1/fleet/" + pct(head) + tail,  # %67et-run
        b"/v1/fleet/" + pct(head, upper=True) + tail,
        b"/v1/fleet/" + pct(name),  # the whole name encoded
        route.replace(b"-", b"%2d", 1) if b"-" in route else route + b"%2d",
        route.replace(b"/", b"%2f"),
        route.replace(b"/", b"%2F"),
        b"/v1%2ffleet/" + name,
        b"/v1/fleet%2f" + name,
        b"/v1/fleet/%252f" + name,  # double-encoded slash
        b"/v1/fleet/%2567" + name[1:],  # double-encoded first letter
        b"/v1/fleet/./" + name,
        b"/v1/./fleet/" + name,
        b"/v1/fleet/%2e/" + name,
        b"/v1/fleet/../fleet/" + name,
        b"/v1/fleet/%2e%2e/fleet/" + name,
        b"/v1/fleet/.%2e/fleet/" + name,
        b"/v1/control/..%2ffleet/" + name,
        b"/v1/control/../fleet/" + name,
        b"/v1/fleet/" + name + b"/..",
        b"/v1/fleet/" + name + b"/../../control/list-nodes",
        b"//v1/fleet/" + name,
        b"/v1//fleet/" + name,
        b"/v1/fleet//" + name,
        route + b"/",
        route + b"?",
        route + b"?a=1",
        route + b"?x=/v1/control/list-nodes",
        route + b"#frag",
        route + b";jsessionid=1",
        route + b"%00",
        route + b"%00.json",
        route + b"%20",
        route + b"+",
        route + b"\x00",
        route + b"\t",
        route + b"\x7f",
        route.upper(),
        route.replace(b"/v1/", b"/V1/"),
        route.replace(b"fleet", b"Fleet"),
        b"/v1/fleet/" + name.upper(),
        b"\\v1\\fleet\\" + name,
        b"/v1/fleet\\" + name,
        route + "é".encode(),
        route + b"%C3%A9",
        b"/v1/fleet" + "∕".encode() + name,  # U+2215 DIVISION SLASH
        b"/v1/fleet" + "／".encode() + name,  # U+FF0F FULLWIDTH SOLIDUS
        b"/v1/fleet/%u0067" + name[1:],
        b"/v1/fleet/%c0%af" + name,  # overlong "/"
    ]


def injections(route: bytes) -> list[bytes]:
    """Targets that carry a second request line: raw, percent-encoded, double-encoded, overlong
    UTF-8, and the U+560A/U+560D pair whose low bytes are LF/CR."""
    out = []
    crlfs = [b"%0d%0a", b"%0D%0A", b"%0a", b"%0A", b"%0d", b"%0d%0d%0a", b"%250d%250a", b"%u000d%u000a", b"%c0%8d%c0%8a", "嘍嘊".encode()]
    for crlf, sp, ctl in product(crlfs, (b"%20", b"+", b"%09"), CONTROL):
        second = b"HTTP/1.1" + crlf + b"Host:" + sp + b"localhost" + crlf + crlf + b"POST" + sp + ctl + sp + b"HTTP/1.1" + crlf + b"X:" + sp
        out.append(route + sp + second)
    for crlf, ctl in product((b"%0d%0a", b"%0a", b"%0d"), CONTROL):
        out.append(b"/" + crlf + b"POST%20" + ctl + b"%20HTTP/1.1" + crlf + b"X:%20" + route)
        out.append(ctl + crlf + route)
    return out


RAW_INJECTIONS = [b"\r\n", b"\n", b"\r", b"\r\r\n", b"\x0b", b"\x0c", b"\x00\r\n"]


def cases(port: int) -> list[Case]:
    """Every case for a proxy on ``port`` (the port goes into absolute URIs)."""
    routes = [r.encode() for r in ROUTES]
    out: list[Case] = [valid(r) for r in routes]
    for r in routes:
        out += [Case("path", request(t)) for t in path_tricks(r)]
        out += [Case("injection", request(t)) for t in injections(r)]
        # a raw CR/LF in the request line: the second line is nginx's to parse, as a header
        for crlf, ctl in product(RAW_INJECTIONS, CONTROL):
            out.append(Case("raw-crlf", request(r + b" HTTP/1.1" + crlf + b"POST " + ctl, version=b" HTTP/1.1")))
        for m in (
            b"GET",
            b"HEAD",
            b"PUT",
            b"PATCH",
            b"DELETE",
            b"OPTIONS",
            b"TRACE",
            b"CONNECT",
            b"PROPFIND",
            b"post",
            b"Post",
            b"POST ",
            b"XPOST",
            b"PO\tST",
        ):
            out.append(Case("method", request(r, method=m)))
        for v in (
            b" HTTP/1.0",
            b" HTTP/1.2",
            b" HTTP/2.0",
            b" HTTP/0.9",
            b" HTTP/1.10",
            b" http/1.1",
            b" HTTP/1.1 ",
            b"  HTTP/1.1",
            b" HTTP/1.1\t",
            b" HTTP/01.1",
            b" HTTP/1.1 x",
        ):
            out.append(Case("version", request(r, version=v)))
        out.append(Case("version", r.replace(b"/v1", b"GET /v1", 1) + b"\r\n"))  # HTTP/0.9: a line without version
        out.append(Case("version", b"POST " + r + b"\r\n"))
        for a in (
            f"https://127.0.0.1:{port}".encode(),
            b"http://superlink",
            b"https://localhost",
            b"HTTPS://127.0.0.1",
            b"http://127.0.0.1:1",
        ):
            out.append(Case("absolute-uri", request(a + r)))
    for target, m in product(
        [*CONTROL, b"/health", b"/docs", b"/openapi.json", b"/", b"*", b"/v1/fleet/", b"/v1/fleet"], (b"POST", b"GET")
    ):
        out.append(Case("other-path", request(target, method=m)))
    for r in (b"/v1/fleet/get-run", b"/v1/fleet/push-object"):
        out += header_cases(r) + framing_cases(r)
    return out


def header_cases(r: bytes) -> list[Case]:
    fwd = ((line(r), BODY),)
    base = [b"Host: 127.0.0.1", b"Content-Type: application/protobuf"]
    n = str(len(BODY)).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    out = [
        Case("header", request(r, headers=[*base], body=b"")),  # no Content-Length at all
        Case("header", request(r, headers=[b"Host: 127.0.0.1", b"Content-Length: " + n])),  # no Content-Type
    ]
    for ct in (
        b"text/plain",
        b"application/json",
        b"application/protobuf; charset=utf-8",
        b"Application/Protobuf",
        b"application/protobuf ,x",
        b"application/grpc",
    ):
        out.append(Case("header", request(r, headers=[b"Host: 127.0.0.1", b"Content-Type: " + ct, b"Content-Length: " + n])))
    for te in (b"chunked", b"Chunked", b" chunked", b"chunked, chunked", b"identity", b"gzip, chunked", b"xchunked"):
        out.append(Case("transfer-encoding", request(r, headers=[*base, b"Transfer-Encoding: " + te], body=chunked)))
        out.append(Case("cl+te", request(r, headers=[*base, b"Content-Length: " + n, b"Transfer-Encoding: " + te])))
        out.append(Case("te+cl", request(r, headers=[*base, b"Transfer-Encoding: " + te, b"Content-Length: " + n])))
    out.append(Case("transfer-encoding", request(r, headers=[*base, b"transfer-encoding: chunked"], body=chunked)))
    out.append(Case("transfer-encoding", request(r, headers=[*base, b"Transfer-Encoding:chunked"], body=chunked)))
    out.append(
        Case("transfer-encoding", request(r, headers=[*base, b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity"], body=chunked))
    )
    for cl in ([n, n], [n, b"0"], [n + b", " + n], [b"+" + n], [b"-1"], [b"0x" + n], [n + b"a"], [b"99999999999999999999"], [b"16777217"]):
        out.append(Case("content-length", request(r, headers=[*base, *(b"Content-Length: " + v for v in cl)])))
    big = b"a" * 9000
    out += [
        Case("huge-header", request(r, extra=[b"X-Pad: " + big])),
        Case("huge-header", request(r, extra=[b"X-Pad-" + big + b": 1"])),
        Case("huge-header", request(r, extra=[b"X-Pad-%d: %s" % (i, b"b" * 1000) for i in range(40)])),  # 40 KiB in all
        Case("huge-header", request(r + b"?" + b"c" * 9000)),
        Case("huge-header", request(r, extra=[b"Cookie: " + b"d" * 9000])),
    ]
    out += [
        Case("header", request(r, headers=[b"Content-Type: application/protobuf", b"Content-Length: " + n])),  # no Host in HTTP/1.1
        Case("header", request(r, extra=[b"Host: evil.example"])),  # two Host lines
        Case("header", request(r, headers=[b"Host: a/b", b"Content-Type: application/protobuf", b"Content-Length: " + n])),
        Case("header", request(r, extra=[b"X-A: 1\r\n folded: value"])),  # obs-fold
        Case("header", request(r, extra=[b"X-A: a\rb"])),
        Case("header", request(r, extra=[b"X-A: a\x00b"])),
        Case("header", request(r, extra=[b"X A: b"])),
        Case("header", request(r, extra=[b": empty-name"])),
        Case("header", request(r, extra=[b"Content-Length : " + n])),
        # well-formed Fleet requests nginx reframes: upstream gets the canonical request
        Case("reframed", request(r, eol=b"\n"), fwd),  # bare LF line ends
        Case("reframed", b"\r\n\r\n" + request(r), fwd),  # blank lines before the request line
        Case("reframed", request(r, extra=[b"Expect: 100-continue"]), fwd),
        Case("reframed", request(r, extra=[b"Upgrade: h2c", b"HTTP2-Settings: AAMAAABkAAQAAP__"]), fwd),
        Case("reframed", request(r, extra=[b"Transfer_Encoding: chunked"]), fwd),  # underscore: nginx drops the header
    ]
    return out


def framing_cases(r: bytes) -> list[Case]:
    """Pipelining and smuggling: a well-formed request with something after it on the same connection."""
    fwd = ((line(r), BODY),)
    smuggled = [b"POST " + c + b" HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" for c in CONTROL]
    out = [Case("pipelined", request(r, close=False) + request(r), fwd + fwd)]
    for s in smuggled:
        out.append(Case("pipelined", request(r, close=False) + s, fwd))
        # the body says it is shorter than it is: the rest is the next request on this connection
        out.append(Case("smuggle-cl", request(r, body=BODY, close=False)[: -len(BODY)] + BODY + s, fwd))
        out.append(
            Case(
                "smuggle-cl",
                request(r, close=False).replace(b"Content-Length: %d" % len(BODY), b"Content-Length: 0")[: -len(BODY)] + s,
                ((line(r), b""),),
            )
        )
        chunked = b"0\r\n\r\n" + s
        base = [b"Host: 127.0.0.1", b"Content-Type: application/protobuf"]
        out.append(
            Case(
                "smuggle-cl.te",
                request(r, headers=[*base, b"Content-Length: %d" % len(chunked), b"Transfer-Encoding: chunked"], body=chunked, close=False),
            )
        )
        out.append(
            Case(
                "smuggle-te.cl",
                request(
                    r,
                    headers=[*base, b"Content-Length: 4", b"Transfer-Encoding: chunked"],
                    body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(s), s),
                    close=False,
                ),
            )
        )
    return out
