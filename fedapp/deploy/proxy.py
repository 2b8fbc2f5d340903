"""The TLS proxy in front of the SuperLink: devices reach the Fleet API and nothing else.

flwr 1.41's SuperLink serves the Control API (start runs, register nodes, list everything),
the Fleet API (SuperNodes) and the Runtime API (the ServerApp) on one HTTPS port, and the
open-source SuperLink authenticates no Control API caller (account login is an Enterprise
plugin). So the SuperLink listens on loopback, and nginx from the distribution listens
where devices dial. It forwards an allowlist, not a prefix: the twelve Fleet routes
flwr 1.41's HTTP Fleet client calls (:data:`FLEET_ROUTES`), each only when the raw request
line is exactly ``POST <route> HTTP/1.1`` (so no percent-encoding, no query, no absolute
URI, no other method or version), with a Content-Length, no Transfer-Encoding and a
protobuf body, and always to a fixed upstream path written into the configuration, never one
built from the client's (decoded) path: nginx decodes ``%0d%0a`` in ``$uri``, and
``proxy_pass ...$uri`` once wrote a second request line into the upstream connection.
Everything else is answered 403 (or 400/405/413/414/501/505 by nginx's parser) and logged as
``fedapp-proxy refused``. Flower checks each forwarded request's signature against the
registered node keys. The operator reaches the Control API on the SuperLink host's
loopback, there or through an SSH tunnel (docs/deploy.md).
"""

from __future__ import annotations

import fcntl
import grp
import ipaddress
import os
import pwd
import shutil
import stat
from pathlib import Path

from fedapp.deploy import DeployError
from fedapp.deploy.certs import split_host
from fedapp.deploy.files import check_private

MAX_BODY = "16m"  # one Fleet request carries at most one object: array chunks are <= 5 MiB in flwr 1.41
REFUSED = "fedapp proxy: only the Fleet API is served here; the Control API is on the SuperLink host's loopback\n"
# every path flwr 1.41's FleetHttpClient (flwr/supernode/fleet_http_client.py) posts to, nothing more
FLEET_ROUTES = tuple(
    f"/v1/fleet/{name}"
    for name in (
        "register-node", "activate-node", "deactivate-node", "unregister-node", "send-node-heartbeat",
        "pull-messages", "push-messages", "get-run", "get-fab", "push-object", "pull-object",
        "confirm-message-received",
    )
)  # fmt: skip
CONTENT_TYPE = "application/protobuf"  # the only body FleetHttpClient sends (flwr/supercore/protobuf/constants.py)


def find_nginx() -> str:
    """nginx on PATH, or where Debian puts it (/usr/sbin is not on every user's PATH)."""
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx", "/usr/local/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise DeployError(
        "nginx is not installed, and the SuperLink's Control API must not face the network without it: "
        "`apt-get install nginx` (Debian/Ubuntu; scripts/setup.sh does it as root)"
    )


def host_port(address: str) -> tuple[str, int]:
    host = split_host(address)
    port = address.rsplit(":", 1)[-1] if address.count(":") == 1 or address.startswith("[") else ""
    if not port.isdigit():
        raise DeployError(f"address {address!r}: expected HOST:PORT")
    return host, int(port)


def _listen(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def worker_user() -> str:
    """nginx's ``user`` line: its workers drop root (nobody, with nobody's own group)."""
    if os.geteuid() != 0:
        return ""
    nobody = pwd.getpwnam("nobody")
    return f"user nobody {grp.getgrgid(nobody.pw_gid).gr_name};\n"


def nginx_conf(*, host: str, port: int, upstream: str, tls_dir: str | Path, workdir: str | Path) -> str:
    """The whole nginx.conf: TLS on ``host:port``, Fleet routes to ``upstream`` (HOST:PORT over TLS)."""
    tls, work = Path(tls_dir).resolve(), Path(workdir).resolve()
    up_host, up_port = host_port(upstream)
    cert = str(tls / "server.pem")
    key = check_private(tls / "server.key", "server key")
    ca = str(tls / "ca.crt")
    for path, what in ((cert, "server certificate"), (ca, "CA certificate")):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{what} {path} does not exist (see `fedapp deploy certs`)")
    # nginx checks the upstream's certificate by DNS name only; every certificate names localhost
    name = "localhost" if _is_ip(up_host) else up_host
    log = refusal_log(work)
    return f"""# written by `fedapp deploy` (fedapp/deploy/proxy.py); regenerated at every start
{worker_user()}daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {work}/client_body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server_tokens off;
    # what nginx answered itself (no upstream): $request is escaped (\\xXX) by nginx
    map $upstream_addr $fedapp_refused {{ "" 1; default 0; }}
    log_format fedapp_refused 'fedapp-proxy refused $remote_addr "$request" $status';
    access_log {log} fedapp_refused if=$fedapp_refused;
    upstream superlink {{ server {_listen(up_host, up_port)}; keepalive 16; }}
    server {{
        listen {_listen(host, port)} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        client_max_body_size {MAX_BODY};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_request_buffering off;
        proxy_buffering off;
        proxy_read_timeout 300s;
        proxy_send_timeout 300s;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate {ca};
        proxy_ssl_name {name};
        default_type text/plain;
        large_client_header_buffers 4 8k;  # a request line or header line over 8 KiB: 414/400
        # refused before any location: framing the SuperNode never uses (it sends Content-Length);
        # nginx >= 1.21.1 answers Content-Length with Transfer-Encoding 400 itself, older ones let chunked win
        if ($http_transfer_encoding != "") {{ return 403; }}
        if ($http_content_length = "") {{ return 403; }}
        if ($content_type != "{CONTENT_TYPE}") {{ return 403; }}
{_fleet_locations()}
        location / {{ return 403; }}
        error_page 403 @refused;
        location @refused {{ return 403 "{REFUSED.strip()}\\n"; }}
    }}
}}
"""


def _fleet_locations() -> str:
    """One exact location per Fleet route. The location matches nginx's decoded path, so each
    also compares the raw request line byte for byte; the upstream path is a literal."""
    return "\n".join(
        f"""        location = {route} {{
            if ($request != "POST {route} HTTP/1.1") {{ return 403; }}
            proxy_pass https://superlink{route};
        }}"""
        for route in FLEET_ROUTES
    )


def refusal_log(workdir: str | Path) -> str:
    """Where nginx logs refusals: the stderr nginx inherits, when this process (the same user,
    the same stderr) can open it by path, else ``workdir``/refused.log. nginx would fail to
    start on a socket (systemd's journal) or another user's pipe or terminal, and on a file
    opened without append (``2>`` rather than ``2>>``) its lines and the other processes'
    would overwrite each other."""
    try:
        if stat.S_ISREG(os.fstat(2).st_mode) and not fcntl.fcntl(2, fcntl.F_GETFL) & os.O_APPEND:
            raise OSError("stderr is a file opened without O_APPEND")
        with open("/dev/stderr", "ab"):
            return "/dev/stderr"
    except OSError:
        return str(Path(workdir).resolve() / "refused.log")


def proxy_argv(workdir: str | Path) -> list[str]:
    """nginx in the foreground on ``workdir``/nginx.conf (write it with :func:`write_conf`)."""
    work = Path(workdir).resolve()
    return [find_nginx(), "-p", f"{work}/", "-c", str(work / "nginx.conf"), "-e", "stderr"]


def write_conf(workdir: str | Path, conf: str) -> None:
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True, mode=0o700)
    (work / "nginx.conf").write_text(conf)


def upstream_of(host: str, port: int) -> str:
    """Where the proxy dials a SuperLink bound to ``host``: a wildcard bind is dialled on loopback."""
    dial = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return _listen(dial, port)
