"""No credential reaches a run folder's provenance: command lines are recorded with every
credential-like value redacted (fedapp.server.redact), whatever form the argument takes."""

from __future__ import annotations

import itertools
import json
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

from fedapp.methods.registry import resolve
from fedapp.server.provenance import collect, user_command
from fedapp.server.redact import REDACTED, redact_argv
from fedapp.sim.run_local import full_config
from tests.flwr_harness import DISCOVERY_TIMEOUT, assert_completed, flwr_run

SECRET = "s3cr3t-Vx9"
OPTIONS = [
    "--token", "--auth-token", "--api-key", "--api_key", "--apikey", "--private-key", "--auth-supernode-private-key",
    "--ssl-keyfile", "--key", "--password", "--passwd", "--db-password", "--secret", "--client-secret", "--credentials",
    "--passphrase", "--session-cookie", "-token", "--TOKEN", "--access_token",
]  # fmt: skip
NEIGHBOURS = [[], ["--stream"], ["--run-config", "num-clients=3 lr=0.1"], ["-v"]]  # what may follow the credential


@pytest.mark.parametrize(("option", "after"), list(itertools.product(OPTIONS, range(len(NEIGHBOURS)))))
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_a_credential_option_loses_its_value_and_nothing_else(option: str, after: int, form: str) -> None:
    before = ["/venv/bin/prog", "run", "."]
    given = [option, SECRET] if form == "separate" else [f"{option}={SECRET}"]
    expected = [option, REDACTED] if form == "separate" else [f"{option}={REDACTED}"]
    out = redact_argv(before + given + NEIGHBOURS[after])
    assert out == before + expected + NEIGHBOURS[after]


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("FLWR_TOKEN=abc123", f"FLWR_TOKEN={REDACTED}"),
        ("api_key=abc123", f"api_key={REDACTED}"),
        ("num-clients=3 auth-token='a b c' lr=0.1", f"num-clients=3 auth-token={REDACTED} lr=0.1"),
        ('password="x y" seed=1', f"password={REDACTED} seed=1"),
        ("db.secret = hunter2", f"db.secret = {REDACTED}"),
        ("https://alice:hunter2@example.org/x", f"https://alice:{REDACTED}@example.org/x"),
        ("Authorization: Bearer eyJhbGciOi.x-y_z", f"Authorization: Bearer {REDACTED}"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----", REDACTED),
        ("MIGHAgEAMBMGByqGSM49AgEGCCqGSM49 -----END EC PRIVATE KEY-----", REDACTED),
    ],
)
def test_credentials_inside_an_argument_are_redacted(arg: str, expected: str) -> None:
    assert redact_argv(["prog", arg]) == ["prog", expected]


@pytest.mark.parametrize(
    "argv",
    [
        ["fedapp", "run", "--run-config", "num-clients=3 method='fedselect' run-dir='runs/x' partition='0,1|2'"],
        ["fedapp", "deploy", "keys", "--nodes", "3", "--out", "material/keys"],
        ["flwr", "run", ".", "lab", "--stream", "--federation-config", "num-supernodes=3"],
        ["python", "-m", "fedapp", "report", "runs/a", "runs/b", "--out", "report.md"],
    ],
)
def test_arguments_without_credentials_are_kept_as_given(argv: list[str]) -> None:
    assert redact_argv(argv) == argv


def test_a_credential_value_that_looks_like_an_option_is_still_taken() -> None:
    assert redact_argv(["prog", "--token", "-x9f", "--auth-token", "-", "--key", "-v"]) == [
        "prog", "--token", REDACTED, "--auth-token", REDACTED, "--key", "-v",
    ]  # fmt: skip


def test_under_flwr_run_the_command_is_the_users_flwr_run_without_the_processes_token() -> None:
    process = ["/venv/bin/flwr-serverapp", "--serverappio-api-address", "127.0.0.1:9091", "--token", "9f3a" * 8, "--insecure"]
    overrides = {"num-clients": 3, "method": "fedavg", "lr": 0.1, "resume": True}
    expected = "flwr run --run-config 'num-clients=3 method=\"fedavg\" lr=0.1 resume=true'"
    assert user_command(process, overrides) == expected
    assert user_command(["/venv/bin/flwr-simulation", "--token", "9f3a"], {}) == "flwr run"
    local = ["/venv/bin/fedapp", "run", "--run-config", "num-clients=3", "--token", "9f3a"]
    assert shlex.split(user_command(local, None)) == [*local[:4], "--token", REDACTED]


def test_the_provenance_a_run_folder_records_names_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    token = "0d1e" * 8
    monkeypatch.setattr(sys, "argv", ["/venv/bin/flwr-serverapp", "--serverappio-api-address", "127.0.0.1:9091", "--token", token])
    record = collect(resolve(full_config({}))[0], {"engine": "flwr run", "run-config-overrides": {"num-clients": 3}})
    assert record["command"] == "flwr run --run-config num-clients=3"
    assert token not in json.dumps(record)


@pytest.mark.flwr
def test_a_simulated_flwr_run_records_the_users_command_not_the_simulation_process(tmp_path: Path) -> None:
    """`flwr run` on the local SuperLink: the ServerApp runs inside `flwr-simulation --token ...`."""
    run = {"num-clients": 2, "partition": "0,1,2,3,4|5,6,7,8,9", "num-server-rounds": 1, "local-steps": 2, "run-dir": str(tmp_path / "r")}
    proc = flwr_run(tmp_path, run, num_supernodes=2)
    assert_completed(proc, tmp_path / "r")
    text = (tmp_path / "r" / "config.json").read_text()
    command = shlex.split(json.loads(text)["provenance"]["command"])
    assert command[:3] == ["flwr", "run", "--run-config"] and len(command) == 4, command
    assert tomllib.loads("\n".join(command[3].split(" "))) == {"discovery-timeout": DISCOVERY_TIMEOUT, **run}  # no value has a space
    assert "--token" not in text and "flwr-simulation" not in text
