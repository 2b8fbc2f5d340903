"""docker/: no Docker engine runs here, so the images are not built in tests. What can be
checked without one is: every command line in compose.yaml parses with `fedapp deploy` and
finds its files among the mounts, the Dockerfiles copy files that exist and start the
documented commands, and the device image keeps its base image's torch."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from fedapp.cli import parser

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
PATH_FLAGS = {"--ca", "--key", "--tls", "--database", "--state-dir", "--data-root"}


def entrypoints(dockerfile: Path) -> dict[str, list[str]]:
    """ENTRYPOINT per build stage (the final stage under the key '')."""
    out, stage = {}, ""
    for line in dockerfile.read_text().splitlines():
        if m := re.match(r"FROM \S+(?: AS (\S+))?", line):
            stage = m.group(1) or ""
        elif line.startswith("ENTRYPOINT "):
            out[stage] = json.loads(line.removeprefix("ENTRYPOINT "))
    return out


def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_commands_parse_and_find_their_files_in_mounts() -> None:
    services = compose()["services"]
    assert {"superlink", "proxy", "register", "supernode-0", "supernode-1", "supernode-2"} <= set(services)
    stages = entrypoints(DOCKER / "Dockerfile")
    for name, svc in services.items():
        if "entrypoint" in svc:
            continue
        argv = stages[svc["build"]["target"]] + [str(a) for a in svc["command"]]
        assert argv[:2] == ["fedapp", "deploy"]
        args = parser().parse_args(argv[1:])
        mounts = [v.rsplit(":", 2)[1] for v in svc["volumes"]]  # SOURCE:TARGET[:MODE], SOURCE may hold ":-"
        for flag, value in itertools.pairwise(argv):
            needed = [f"{value}/{f}" for f in ("ca.crt", "server.pem", "server.key")] if flag == "--tls" else [value]
            for path in needed if flag in PATH_FLAGS else []:
                assert any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts), (name, flag, path, mounts)
        if svc["build"]["target"] == "supernode":
            assert args.ca and args.key and not args.insecure  # TLS + node authentication
            assert args.superlink == "proxy:8000" and args.num_partitions == 3
        elif svc["build"]["target"] == "proxy":
            assert (args.upstream, args.port) == (f"superlink:{services['superlink']['ports'][0].split(':')[-1]}", 8000)
        else:
            assert args.tls == "/tls" and not args.insecure and not args.no_auth and args.no_proxy
    node_ids = sorted(int(s["command"][s["command"].index("--partition-id") + 1]) for n, s in services.items() if n.startswith("supernode"))
    assert node_ids == [0, 1, 2]
    assert "ca.key" not in json.dumps(services)  # the CA's private key stays with the operator


def test_compose_registers_each_supernodes_key_for_the_partition_it_claims() -> None:
    services = compose()["services"]
    registered = shlex.split(services["register"]["command"][0].split("&&")[-1])
    assert registered[:4] == ["fedapp", "deploy", "register", "--connection"]
    nodes = [[str(a) for a in s["command"]] for n, s in services.items() if n.startswith("supernode")]
    claims = {f"{c[c.index('--partition-id') + 1]}={c[c.index('--key') + 1]}.pub" for c in nodes}
    assert len(claims) == 3 and set(registered[5:]) == claims


def test_compose_keeps_the_supernodes_away_from_the_superlinks_own_port() -> None:
    """The SuperLink's port serves the Control API: only the control network and this host's
    loopback reach it; SuperNodes share a network with the proxy alone."""
    services = compose()["services"]
    nodes = [s for n, s in services.items() if n.startswith("supernode")]
    assert all(s["networks"] == ["fleet"] for s in nodes)
    assert services["superlink"]["networks"] == ["control"] and services["register"]["networks"] == ["control"]
    assert sorted(services["proxy"]["networks"]) == ["control", "fleet"]
    assert services["superlink"]["ports"] == ["127.0.0.1:9093:9093"]
    assert services["proxy"]["ports"] == ["${FEDAPP_FLEET_ADDRESS:-127.0.0.1}:8000:8000"]  # loopback unless the operator says


def test_dockerfiles_copy_existing_files_and_run_as_non_root() -> None:
    for dockerfile in (DOCKER / "Dockerfile", DOCKER / "jetson.Dockerfile"):
        text = dockerfile.read_text()
        for line in text.splitlines():
            if line.startswith("COPY "):
                for src in line.split()[1:-1]:
                    assert (ROOT / src).exists(), (dockerfile.name, src)
        assert "USER fedapp" in text and "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in text
    assert set(entrypoints(DOCKER / "Dockerfile")) == {"superlink", "proxy", "supernode"}
    assert entrypoints(DOCKER / "jetson.Dockerfile")[""] == ["fedapp", "deploy", "supernode", "--no-restart"]


def test_device_requirements_keep_the_base_images_torch_and_drop_ray() -> None:
    out = subprocess.run(
        [sys.executable, str(DOCKER / "node_requirements.py"), str(ROOT / "pyproject.toml")], capture_output=True, text=True, check=True
    )
    reqs = out.stdout.split()
    assert not any(r.startswith("torch") and r != "torchvision" for r in reqs) and "torchvision" in reqs
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    flwr = next(d for d in declared if re.match(r"flwr[<>=!~]", d))  # the range pyproject.toml declares, e.g. flwr>=1.41.0,<1.43
    assert flwr in reqs and not any(r.startswith(("ray", "matplotlib")) or "simulation" in r for r in reqs)
    assert "medmnist>=3.0" in reqs  # the one extra a board takes along
    for torch, vision in (("2.6.0", "0.21"), ("2.14.1+cu130", "0.29"), ("2.11", "0.26"), ("2.8.0a0+git5f1b", "0.23")):
        argv = [sys.executable, str(DOCKER / "node_requirements.py"), str(ROOT / "pyproject.toml"), torch]
        pinned = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
        assert f"torchvision=={vision}.*" in pinned and "torchvision" not in pinned, (torch, pinned)


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed (validation only; no engine needed)")
def test_compose_file_validates_with_docker_compose() -> None:
    proc = subprocess.run(["docker-compose", "-f", str(DOCKER / "compose.yaml"), "config", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
