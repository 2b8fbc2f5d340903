"""Writing and trusting deployment files: private keys exist only with mode 0600.

A key is written to a temporary file that ``tempfile.mkstemp`` creates 0600 (whatever the
umask), then renamed over its final name, so there is no moment at which the key is on disk
with a looser mode, and a crash leaves the old file or the new one. Certificates and public
keys are meant to be handed out and are written 0644 the same way. A private key found with
any group or other permission bit is refused instead of used.
"""

from __future__ import annotations

import stat
from pathlib import Path

from fedapp.core.atomic import write_atomic
from fedapp.deploy import DeployError

PRIVATE = 0o600
PUBLIC = 0o644


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Atomically write ``data`` to ``path``; the file never has a mode looser than ``mode``."""
    write_atomic(path, lambda fh: fh.write(data), None if mode == PRIVATE else mode)


# how the files handed out in place of a private key begin: OpenSSH public keys (``KEY.pub``),
# PEM public keys and certificates (``ca.crt``, ``server.pem``)
NOT_PRIVATE = {
    b"ecdsa-sha2-": "an OpenSSH public key", b"ssh-": "an OpenSSH public key", b"sk-": "an OpenSSH public key",
    b"-----BEGIN PUBLIC KEY": "a PEM public key", b"-----BEGIN CERTIFICATE": "a certificate",
}  # fmt: skip


def public_kind(head: bytes) -> str | None:
    """What a file starting with ``head`` is, where it is a public key or a certificate."""
    head = head.lstrip()
    return next((kind for start, kind in NOT_PRIVATE.items() if head.startswith(start)), None)


def check_private(path: str | Path, what: str) -> str:
    """``path`` as a string, after making sure it is a private key (a public key or certificate
    given in its place is named as such) that only its owner can read."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} {p} does not exist (see `fedapp deploy certs` / `fedapp deploy keys`)")
    with p.open("rb") as fh:
        kind = public_kind(fh.read(64))
    if kind is not None:
        hint = f"the private key is {p.with_suffix('')}, without .pub" if p.suffix == ".pub" else "give the private key's file"
        raise DeployError(f"{what} {p} is {kind}, not a private key: {hint}")
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        raise DeployError(f"{what} {p} has mode {mode:04o}: others may read it; `chmod 600 {p}` if it never leaked, else issue a new one")
    return str(p)
