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


def check_private(path: str | Path, what: str) -> str:
    """``path`` as a string, after making sure it is a file only its owner can read."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} {p} does not exist (see `fedapp deploy certs` / `fedapp deploy keys`)")
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        raise DeployError(f"{what} {p} has mode {mode:04o}: others may read it; `chmod 600 {p}` if it never leaked, else issue a new one")
    return str(p)
