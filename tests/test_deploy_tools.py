"""`fedapp deploy` helpers, checked with independent tools: openssl verifies the certificates,
ssh-keygen reads the keys, Flower's own parsers accept the command lines and connection."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from flwr.common.config import parse_config_args
from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

from fedapp.cli import main
from fedapp.deploy import DeployError
from fedapp.deploy.certs import make_certs
from fedapp.deploy.commands import node_config_arg, registration, superlink_argv, supernode_argv
from fedapp.deploy.connection import write_connection
from fedapp.deploy.keys import make_node_keys
from fedapp.deploy.supervise import supervise


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl (the independent check) is not installed")
def test_certs_verify_with_openssl_and_name_every_address(tmp_path: Path) -> None:
    files = make_certs(["127.0.0.1", "superlink", "localhost:8000", "[::1]:8000"], tmp_path)
    assert "OK" in openssl("verify", "-CAfile", str(files.ca_cert), str(files.server_cert))
    san = openssl("x509", "-in", str(files.server_cert), "-noout", "-ext", "subjectAltName")
    for entry in ("IP Address:127.0.0.1", "DNS:superlink", "DNS:localhost", "IP Address:0:0:0:0:0:0:0:1"):
        assert entry in san
    assert "CA:TRUE" in openssl("x509", "-in", str(files.ca_cert), "-noout", "-ext", "basicConstraints")
    assert oct(files.ca_key.stat().st_mode & 0o777) == oct(files.server_key.stat().st_mode & 0o777) == "0o600"
    ca_before = files.ca_cert.read_bytes()
    again = make_certs(["10.0.0.5"], tmp_path)  # new address, same CA: nodes keep their ca.crt
    assert again.ca_cert.read_bytes() == ca_before
    assert "OK" in openssl("verify", "-CAfile", str(files.ca_cert), str(again.server_cert))


@pytest.mark.parametrize("bad", ["", "my host", "http://x/y", "host:port", "-x.org"])
def test_certs_reject_what_is_not_an_address(tmp_path: Path, bad: str) -> None:
    with pytest.raises(DeployError, match="address"):
        make_certs([bad], tmp_path)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (the independent check) is not installed")
def test_node_keys_are_openssh_ec_keys_flower_accepts_and_are_kept(tmp_path: Path) -> None:
    pairs = make_node_keys(2, tmp_path)
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(pairs[1][1])], capture_output=True, text=True, check=True).stdout
    assert out.startswith("256 SHA256:") and out.rstrip().endswith("(ECDSA)")
    key = load_ssh_private_key(pairs[0][0].read_bytes(), None)  # what flower-supernode does
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    before = pairs[0][0].read_bytes()
    assert make_node_keys(3, tmp_path)[0][0].read_bytes() == before and (tmp_path / "supernode-2").exists()


def test_command_lines_are_secure_by_default_and_parse_with_flowers_own_parsers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", raising=False)  # the flag alone must turn it off
    tls = make_certs(["127.0.0.1"], tmp_path / "tls")
    (priv, _pub), *_ = make_node_keys(1, tmp_path / "keys")
    link = superlink_argv(database=tmp_path / "state.db", tls_dir=tls.ca_cert.parent, port=9443)
    args = _parse_args_run_superlink().parse_args(link[1:])
    assert (args.ssl_certfile, args.ssl_keyfile, args.ssl_ca_certfile) == (str(tls.server_cert), str(tls.server_key), str(tls.ca_cert))
    assert args.enable_supernode_auth and not args.insecure and args.runtime_dependency_install is False
    assert (args.database, args.port, args.host) == (str(tmp_path / "state.db"), 9443, "127.0.0.1")
    node_cfg = {
        "partition-id": 2,
        "num-partitions": 3,
        "state-dir": "/var/lib/fedapp",
        "data-root": "/data",
        "tier": "low",
        "device-name": "orin-1",
    }
    node = supernode_argv(superlink="10.0.0.5:9443", node_config=node_cfg, ca=tls.ca_cert, key=priv, port=9100)
    nargs = _parse_args_run_supernode().parse_args(node[1:])
    assert (nargs.root_certificates, nargs.auth_supernode_private_key, nargs.insecure) == (str(tls.ca_cert), str(priv), False)
    assert parse_config_args([nargs.node_config]) == node_cfg  # the ClientApp sees exactly these values
    insecure = _parse_args_run_superlink().parse_args(superlink_argv(database="s.db", tls_dir=None, auth=False)[1:])
    assert insecure.insecure and not insecure.enable_supernode_auth


def test_insecure_mode_is_only_explicit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DeployError, match="authentication needs TLS"):
        superlink_argv(database="s.db", tls_dir=None)
    with pytest.raises(DeployError, match="needs TLS"):
        supernode_argv(superlink="h:1", node_config={"partition-id": 0, "num-partitions": 1, "state-dir": "s"}, ca=None, key="k")
    with pytest.raises(DeployError, match="state-dir is required"):
        supernode_argv(superlink="h:1", node_config={"partition-id": 0, "num-partitions": 1}, ca=None, key=None)
    with pytest.raises(DeployError, match="unknown node-config key"):
        node_config_arg({"partition": 1})
    assert main(["deploy", "superlink", "--dry-run"]) == 2
    assert "--insecure for plain HTTP" in capsys.readouterr().err
    assert main(["deploy", "supernode", "--superlink", "h:1", "--partition-id", "0", "--num-partitions", "1", "--state-dir", "s"]) == 2
    assert main(["deploy", "superlink", "--insecure", "--no-auth", "--dry-run", "--database", str(tmp_path / "x.db")]) == 0
    assert shlex.split(capsys.readouterr().out)[-1] == "--insecure"


def test_register_binds_a_key_to_the_partition_before_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "3=odd.pub"  # a key file whose own name has the form: taken as a path
    odd.write_text("x")
    assert registration("keys/supernode-0.pub") == ("keys/supernode-0.pub", "supernode-0")
    assert registration("0=keys/supernode-0.pub") == ("keys/supernode-0.pub", "supernode-0:partition-0")
    assert registration("12=/k/board=7.pub") == ("/k/board=7.pub", "board=7:partition-12")
    assert registration(str(odd)) == (str(odd), "3=odd")
    for bad in ("x=k.pub", "-1=k.pub", "01=k.pub", "=k.pub", "1234567890=k.pub"):
        with pytest.raises(DeployError, match=r"PARTITION=KEY\.pub"):
            registration(bad)
    assert main(["deploy", "register", "--connection", "c", "0=a.pub", "one=b.pub"]) == 2  # before any key is registered
    assert "'one=b.pub': expected KEY.pub or PARTITION=KEY.pub" in capsys.readouterr().err


def test_connection_block_is_read_back_by_flower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.cli.flower_config import read_superlink_connection

    tls = make_certs(["127.0.0.1"], tmp_path / "tls")
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n')
    write_connection("lab", "10.0.0.5:9443", tls.ca_cert, home)
    write_connection("open", "10.0.0.6:8000", None, home)
    monkeypatch.setenv("FLWR_HOME", str(home))
    lab, open_, local = (read_superlink_connection(n) for n in ("lab", "open", "local"))
    assert (lab.address, lab.root_certificates, lab.insecure) == ("10.0.0.5:9443", str(tls.ca_cert), False)
    assert (open_.address, open_.insecure) == ("10.0.0.6:8000", True)
    assert local.address == ":local:"
    assert read_superlink_connection(None).name == "local"  # the existing default is kept


def test_supervisor_restarts_an_exiting_process_and_stops_on_sigterm(tmp_path: Path) -> None:
    count = tmp_path / "starts"
    child = (
        f"import pathlib; p = pathlib.Path({str(count)!r}); p.write_text(p.read_text() + 'x' if p.exists() else 'x'); raise SystemExit(3)"
    )
    assert supervise([sys.executable, "-c", child], -1.0) == 3 and count.read_text() == "x"  # no restart
    count.unlink()
    code = f"from fedapp.deploy.supervise import supervise; supervise({[sys.executable, '-c', child]!r}, 0.2)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while (not count.exists() or len(count.read_text()) < 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(count.read_text()) >= 3  # it came back after each exit
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) in (0, 3, -15)


def test_private_keys_exist_only_with_mode_0600_from_creation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under umask 0 every private key is created by os.open with mode 0600 (O_CREAT|O_EXCL, a
    fresh name) and renamed into place already 0600; nothing is chmod'ed after writing."""
    opened: list[tuple[str, int, int]] = []
    renamed: dict[str, int] = {}
    chmodded: list[str] = []
    real_open, real_replace, real_chmod = os.open, os.replace, os.chmod

    def spy_open(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        opened.append((os.path.basename(path), flags, mode))
        return real_open(path, flags, mode, **kw)

    def spy_replace(src: Any, dst: Any, **kw: Any) -> None:
        renamed[os.path.basename(dst)] = stat.S_IMODE(os.stat(src).st_mode)
        real_replace(src, dst, **kw)

    def spy_chmod(path: Any, mode: int, **kw: Any) -> None:
        chmodded.append(os.path.basename(path))
        real_chmod(path, mode, **kw)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "replace", spy_replace)
    monkeypatch.setattr(os, "chmod", spy_chmod)
    old = os.umask(0)
    try:
        make_certs(["10.0.0.5"], tmp_path / "tls")
        make_node_keys(1, tmp_path / "keys")
    finally:
        os.umask(old)
    private = {"ca.key", "server.key", "supernode-0"}
    assert not chmodded
    for name in private:
        created = [(flags, mode) for base, flags, mode in opened if base.startswith(f".{name}.")]
        assert created, f"{name} was not created through os.open"
        assert all(mode == 0o600 and flags & os.O_CREAT and flags & os.O_EXCL for flags, mode in created), (name, created)
        assert renamed[name] == 0o600
    assert {k: v for k, v in renamed.items() if k not in private} == {"ca.crt": 0o644, "server.pem": 0o644, "supernode-0.pub": 0o644}
    for path in [*(tmp_path / "tls").iterdir(), *(tmp_path / "keys").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == (0o600 if path.name in private else 0o644), path


def test_loose_existing_keys_are_refused_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tls = make_certs(["127.0.0.1"], tmp_path / "tls")
    (priv, _pub), *_ = make_node_keys(1, tmp_path / "keys")
    tls.ca_key.chmod(0o644)
    with pytest.raises(DeployError, match=r"CA key .*ca\.key has mode 0644"):
        make_certs(["127.0.0.2"], tmp_path / "tls")
    priv.chmod(0o640)
    with pytest.raises(DeployError, match=r"SuperNode private key .*supernode-0 has mode 0640"):
        make_node_keys(1, tmp_path / "keys")
    with pytest.raises(DeployError, match="supernode-0 has mode 0640"):
        supernode_argv(superlink="h:1", node_config={"partition-id": 0, "num-partitions": 1, "state-dir": "s"}, ca=tls.ca_cert, key=priv)
    tls.server_key.chmod(0o604)
    with pytest.raises(DeployError, match=r"server key .*server\.key has mode 0604"):
        superlink_argv(database="s.db", tls_dir=tls.ca_cert.parent)
    node = ["deploy", "supernode", "--superlink", "h:1", "--partition-id", "0", "--num-partitions", "1", "--state-dir", "s"]
    assert main([*node, "--ca", str(tls.ca_cert), "--key", str(priv), "--dry-run"]) == 2
    assert "chmod 600" in capsys.readouterr().err


def test_supernode_insecure_with_a_key_or_ca_is_refused_not_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tls = make_certs(["127.0.0.1"], tmp_path / "tls")
    (priv, _pub), *_ = make_node_keys(1, tmp_path / "keys")
    node = ["deploy", "supernode", "--superlink", "h:1", "--partition-id", "0", "--num-partitions", "1", "--state-dir", "s", "--dry-run"]
    assert main([*node, "--insecure", "--key", str(priv)]) == 2
    assert main([*node, "--insecure", "--ca", str(tls.ca_cert)]) == 2
    assert capsys.readouterr().err.count("drop --ca and --key, or drop --insecure") == 2
    assert main([*node, "--insecure"]) == 0
    assert shlex.split(capsys.readouterr().out.splitlines()[0])[-1] == "--insecure"


def test_supernode_runs_its_messages_in_the_warm_runtime_unless_told_flower_s(capsys: pytest.CaptureFixture[str]) -> None:
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

    node = ["deploy", "supernode", "--superlink", "h:1", "--partition-id", "0", "--num-partitions", "1", "--state-dir", "s"]
    assert main([*node, "--insecure", "--port", "9111", "--dry-run"]) == 0
    supernode, runtime = capsys.readouterr().out.splitlines()
    assert _parse_args_run_supernode().parse_args(shlex.split(supernode)[1:]).isolation == "process"  # Flower launches nothing itself
    assert shlex.split(runtime)[1:] == ["-m", "fedapp.deploy.warm_runtime", "--runtime-api-address", "127.0.0.1:9111", "--insecure"]
    assert main([*node, "--insecure", "--runtime", "flower", "--dry-run"]) == 0
    (only,) = capsys.readouterr().out.splitlines()
    assert _parse_args_run_supernode().parse_args(shlex.split(only)[1:]).isolation == "subprocess"  # Flower's default
    assert main([*node, "--insecure", "--runtime", "flower", "--runtime-poll-interval", "0.5", "--dry-run"]) == 2
    assert "--runtime-poll-interval is the warm runtime's" in capsys.readouterr().err


def test_default_shape_binds_the_superlink_to_loopback_behind_a_valid_proxy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tls = make_certs(["10.0.0.5"], tmp_path / "tls")
    assert main(["deploy", "superlink", "--tls", str(tls.ca_cert.parent), "--dry-run", "--proxy-dir", str(tmp_path / "px")]) == 0
    link, nginx, superexec, *conf = capsys.readouterr().out.splitlines()
    args = _parse_args_run_superlink().parse_args(shlex.split(link)[1:])
    assert shlex.split(superexec)[1:] == ["--runtime-api-address", "127.0.0.1:9093", "--root-certificates", str(tls.ca_cert)]
    assert (args.host, args.port, args.enable_supernode_auth) == ("127.0.0.1", 9093, True)
    text = "\n".join(conf)
    assert "listen 127.0.0.1:8000 ssl;" in text and "0.0.0.0" not in text
    assert "upstream superlink { server 127.0.0.1:9093;" in text
    assert main(["deploy", "superlink", "--insecure", "--no-auth", "--dry-run"]) == 0
    assert _parse_args_run_superlink().parse_args(shlex.split(capsys.readouterr().out.splitlines()[0])[1:]).host == "127.0.0.1"
    # nginx itself accepts the configuration it will run
    from fedapp.deploy.proxy import write_conf

    write_conf(tmp_path / "px", text + "\n")
    check = subprocess.run([*shlex.split(nginx), "-t"], capture_output=True, text=True)
    assert check.returncode == 0 and "syntax is ok" in check.stderr, check.stderr


def test_supervised_group_stops_its_partner_when_one_exits(tmp_path: Path) -> None:
    """The SuperLink and its proxy run as one group: one exiting takes the other down (and, with
    a restart delay, both come back), so the proxy never fronts a dead SuperLink for long."""
    from fedapp.deploy.supervise import supervise_group

    pid_file = tmp_path / "sleeper.pid"
    tmp = f"{pid_file}.tmp"
    write_pid = f"open({tmp!r}, 'w').write(str(os.getpid())); os.rename({tmp!r}, {str(pid_file)!r})"
    sleeper = [sys.executable, "-c", f"import os, time; {write_pid}; time.sleep(600)"]
    wait = f"import os, time\nwhile not os.path.exists({str(pid_file)!r}):\n    time.sleep(0.05)\nraise SystemExit(5)"
    quitter = [sys.executable, "-c", wait]  # exits once the sleeper is up
    assert supervise_group([sleeper, quitter], -1.0) == 5
    sleeper_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(sleeper_pid, 0)  # terminated and reaped by the supervisor


def test_a_respawned_helper_comes_back_alone_and_stops_with_the_group(tmp_path: Path) -> None:
    """The SuperLink's SuperExec exits for good on the first error the SuperLink answers; the
    supervisor starts it again by itself (the SuperLink and its proxy keep running, their runs
    intact), also with --no-restart, and stops it with the group."""
    root = Path(__file__).resolve().parents[1]
    starts, member = tmp_path / "starts", tmp_path / "member.pid"
    count = f"p = pathlib.Path({str(starts)!r}); p.write_text(p.read_text() + 'x' if p.exists() else 'x')"
    helper = [sys.executable, "-c", f"import pathlib, sys; {count}; sys.exit(1)"]
    write_pid = f"pathlib.Path({str(member)!r}).write_text(str(os.getpid()))"
    sleeper = [sys.executable, "-c", f"import os, pathlib, time; {write_pid}; time.sleep(600)"]
    code = f"from fedapp.deploy.supervise import supervise_group; raise SystemExit(supervise_group({[sleeper]!r}, -1.0, [{helper!r}], 0.1))"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=root)
    try:
        deadline = time.monotonic() + 60
        while (not starts.exists() or len(starts.read_text()) < 4) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(starts.read_text()) >= 4  # started again after each exit
        first = int(member.read_text())
        os.kill(first, 0)  # the group's member was never restarted: the same process throughout
        assert proc.poll() is None
    finally:
        proc.terminate()
        rc = proc.wait(timeout=30)
    seen = len(starts.read_text())
    time.sleep(0.5)
    assert len(starts.read_text()) == seen  # stopped with the group: no respawn after
    assert rc == 256 - 15  # the member's SIGTERM status, as the supervisor's exit code
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)


def test_superlink_runs_serverapps_through_a_supervised_superexec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--isolation process` and a SuperExec dialing the SuperLink's own address, as Flower would start it."""
    assert main(["deploy", "superlink", "--insecure", "--no-auth", "--dry-run", "--host", "0.0.0.0", "--port", "9999",
                 "--database", str(tmp_path / "x.db")]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert "--isolation process" in lines[0]
    assert lines[1].split()[1:] == ["--runtime-api-address", "127.0.0.1:9999", "--insecure"]
    assert Path(lines[1].split()[0]).name == "flower-superexec"
