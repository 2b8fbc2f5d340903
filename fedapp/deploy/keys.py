"""SuperNode authentication keys: one EC P-256 key pair per node, OpenSSH format.

Flower 1.41 admits a SuperNode under ``--enable-supernode-auth`` only if its public key was
registered with ``flwr supernode register``; the node proves it with
``--auth-supernode-private-key`` (an EC key in OpenSSH format, what ``ssh-keygen -t ecdsa``
writes). Generating them here keeps the operator's path to one command without ssh-keygen.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedapp.deploy import DeployError
from fedapp.deploy.files import PRIVATE, PUBLIC, check_private, write_file


def make_node_key(path: str | Path, comment: str = "") -> tuple[Path, Path]:
    """Write ``path`` (private, 0600) and ``path.pub``; returns both."""
    priv = Path(path)
    pub = priv.with_name(priv.name + ".pub")
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    write_file(priv, pem, PRIVATE)
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    write_file(pub, line + (f" {comment}".encode() if comment else b"") + b"\n", PUBLIC)
    return priv, pub


def make_node_keys(num_nodes: int, out: str | Path, prefix: str = "supernode") -> list[tuple[Path, Path]]:
    """Keys ``<out>/<prefix>-<i>`` for i in 0..num_nodes-1 (existing keys are kept, not replaced,
    and refused if others may read them)."""
    if num_nodes < 1:
        raise DeployError(f"--nodes = {num_nodes}: expected a positive number of SuperNodes")
    out = Path(out)
    pairs = []
    for i in range(num_nodes):
        priv = out / f"{prefix}-{i}"
        pub = priv.with_name(priv.name + ".pub")
        if priv.exists() and pub.exists():
            check_private(priv, "SuperNode private key")
            pairs.append((priv, pub))
        else:
            pairs.append(make_node_key(priv, f"{prefix}-{i}"))
    return pairs
