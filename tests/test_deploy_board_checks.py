"""The mistakes a first board deployment makes, each refused or kept harmless before anything runs:
partition ids numbered from 1, a public key given where the private one belongs, and a new
deployment connection taking over a plain `flwr run .` (Flower's own reader decides that)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from fedapp.cli import main
from fedapp.deploy import DeployError
from fedapp.deploy.certs import make_certs
from fedapp.deploy.commands import superlink_argv
from fedapp.deploy.keys import make_node_keys

NODE = ["deploy", "supernode", "--superlink", "10.0.0.5:8000", "--state-dir", "s", "--dry-run"]


@pytest.mark.parametrize(("pid", "num"), [(3, 3), (-1, 3), (1, 1), (5, 2)])
def test_supernode_refuses_a_partition_id_outside_the_federation(pid: int, num: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*NODE, "--insecure", "--partition-id", str(pid), "--num-partitions", str(num)]) == 2
    err = capsys.readouterr().err
    assert f"--partition-id {pid} is outside 0..{num - 1} (--num-partitions {num})" in err, err


def test_supernode_refuses_an_empty_federation_and_accepts_the_last_partition(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*NODE, "--insecure", "--partition-id", "0", "--num-partitions", "0"]) == 2
    assert "--num-partitions 0: expected the federation's number of nodes (1 or more)" in capsys.readouterr().err
    assert main([*NODE, "--insecure", "--partition-id", "2", "--num-partitions", "3"]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert "partition-id=2 num-partitions=3" in argv[argv.index("--node-config") + 1]


def test_a_public_key_given_as_the_private_key_is_named_by_its_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tls = make_certs(["127.0.0.1"], tmp_path / "tls")
    (priv, pub), *_ = make_node_keys(1, tmp_path / "keys")
    secure = [*NODE, "--partition-id", "0", "--num-partitions", "1", "--ca", str(tls.ca_cert)]
    assert main([*secure, "--key", str(pub)]) == 2
    err = capsys.readouterr().err
    assert f"SuperNode private key {pub} is an OpenSSH public key, not a private key: the private key is {priv}, without .pub" in err
    assert "chmod" not in err and "mode" not in err
    renamed = tmp_path / "board-key"  # recognised by what it holds, whatever its name and mode
    shutil.copy(pub, renamed)
    renamed.chmod(0o600)
    assert main([*secure, "--key", str(renamed)]) == 2
    assert f"{renamed} is an OpenSSH public key, not a private key: give the private key's file" in capsys.readouterr().err
    assert main([*secure, "--key", str(priv)]) == 0  # the private key itself passes
    supernode_line = capsys.readouterr().out.splitlines()[0]  # then the warm runtime's line
    assert shlex.split(supernode_line)[-1] == str(priv)
    shutil.copy(tls.server_cert, tls.server_key)  # the certificate copied over the SuperLink's key
    tls.server_key.chmod(0o600)
    with pytest.raises(DeployError, match=r"server key .*server\.key is a certificate, not a private key"):
        superlink_argv(database="s.db", tls_dir=tls.ca_cert.parent)


def test_deploy_connection_in_a_fresh_flower_home_keeps_simulation_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a later plain `flwr run .` dials is Flower's default connection, read by Flower itself."""
    from flwr.cli.constant import LOCAL_SUPERLINK_ADDRESS_MAGIC_VALUE
    from flwr.cli.flower_config import read_superlink_connection

    tls = make_certs(["127.0.0.1"], tmp_path / "tls")
    home = tmp_path / "fresh-home"  # no config.toml, not even the folder
    cmd = ["deploy", "connection", "--address", "10.0.0.5:9093", "--ca", str(tls.ca_cert), "--flwr-home", str(home)]
    assert main([*cmd, "--name", "boards"]) == 0
    monkeypatch.setenv("FLWR_HOME", str(home))
    default = read_superlink_connection(None)
    assert (default.name, default.address) == ("local", LOCAL_SUPERLINK_ADDRESS_MAGIC_VALUE)
    boards = read_superlink_connection("boards")
    assert (boards.address, boards.root_certificates) == ("10.0.0.5:9093", str(tls.ca_cert))
    assert main([*cmd, "--name", "lab", "--default"]) == 0  # asked for: the deployment becomes the default
    assert read_superlink_connection(None).name == "lab"
    assert read_superlink_connection("boards").address == "10.0.0.5:9093"  # kept
    capsys.readouterr()
