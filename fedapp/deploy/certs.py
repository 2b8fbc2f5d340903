"""A private CA and a SuperLink server certificate for the addresses nodes dial.

SuperNodes, the `flwr` CLI, the ServerApp and the proxy verify the SuperLink with ``ca.crt``
(``--root-certificates`` / ``root-certificates``). The server certificate names every
address clients use (IP addresses and DNS names as SANs), because clients check the name
they dialled against it; ``127.0.0.1`` and ``localhost`` are always among them, since the
SuperLink itself listens on loopback behind the proxy (docs/deploy.md).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedapp.deploy import DeployError
from fedapp.deploy.files import PRIVATE, PUBLIC, check_private, write_file

CA_DAYS = 3650
SERVER_DAYS = 825
LOOPBACK = ["127.0.0.1", "localhost"]  # the SuperLink's own listener: the proxy, the ServerApp, the operator's tunnel


@dataclass(frozen=True)
class TlsFiles:
    """Where the generated material lives. ``ca.key`` never leaves the operator's machine."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedapp"), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def split_host(raw: str) -> str:
    """The host of ``host``, ``host:port``, ``v6`` or ``[v6]:port``; a bad port is an error."""
    text = raw.strip()
    if text.startswith("[") and "]" in text:
        host, port = text[1 : text.index("]")], text[text.index("]") + 1 :].removeprefix(":")
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    if port and not port.isdigit():
        raise DeployError(f"address {raw!r}: port {port!r} is not a number")
    return host


def san_entries(addresses: list[str]) -> list[x509.GeneralName]:
    """IP literals become IP SANs, host names DNS SANs (a ``:port`` suffix is ignored)."""
    if not addresses:
        raise DeployError("give at least one address the SuperNodes dial (e.g. --address 127.0.0.1)")
    out: list[x509.GeneralName] = []
    for raw in addresses:
        host = split_host(raw)
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not HOSTNAME.fullmatch(host):
                raise DeployError(f"address {raw!r} is neither an IP address nor a DNS name") from None
            out.append(x509.DNSName(host))
    return out


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def make_certs(addresses: list[str], out: str | Path, now: dt.datetime | None = None) -> TlsFiles:
    """Write ``ca.crt``/``ca.key`` and ``server.pem``/``server.key`` (EC P-256) under ``out``.

    An existing CA in ``out`` is reused, so re-issuing the server certificate for a new
    address keeps every node's ``ca.crt`` valid.
    """
    out = Path(out)
    files = TlsFiles(out / "ca.crt", out / "ca.key", out / "server.pem", out / "server.key")
    sans = san_entries(addresses)
    sans += [x for x in san_entries(LOOPBACK) if x not in sans]
    now = now or dt.datetime.now(dt.UTC)
    if files.ca_cert.exists() and files.ca_key.exists():
        ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        ca_key = serialization.load_pem_private_key(Path(check_private(files.ca_key, "CA key")).read_bytes(), None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise DeployError(f"{files.ca_key} is not an EC private key")
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(_name("fedapp private CA"))
            .issuer_name(_name("fedapp private CA"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        write_file(files.ca_key, _key_pem(ca_key), PRIVATE)
        write_file(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), PUBLIC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(addresses[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)  # type: ignore[arg-type]
        .sign(ca_key, hashes.SHA256())
    )
    write_file(files.server_key, _key_pem(key), PRIVATE)
    write_file(files.server_cert, cert.public_bytes(serialization.Encoding.PEM), PUBLIC)
    return files
