"""Typed, validated run-config.

Flower hands apps a flat dict of kebab-case keys (``context.run_config``). We turn
it into frozen dataclasses before any training, so a wrong value stops the run at
once with an error naming the key, the value and what is allowed. Each method adds
its own small dataclass (``Method.params``) instead of one global bag of flags.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

Scalar = bool | int | float | str


class ConfigError(ValueError):
    """A run-config value is missing, of the wrong type, or out of range."""


def key(default: Scalar, check: Callable[[Any], str | None] | None = None, doc: str = "", numbers: tuple[type, ...] = ()) -> Any:
    """Declare a run-config field: its default, an optional check and a one-line doc.

    ``check(value)`` returns None when the value is fine, else a phrase saying what
    is allowed (used verbatim in the error). ``numbers``: for a text key whose text may be a
    bare number (``mlp-hidden = 64`` as TOML reads it), the number types taken as that text.
    """
    return dataclasses.field(default=default, metadata={"check": check, "doc": doc, "numbers": numbers})


Check = Callable[[Any], "str | None"]
ALLOWED: dict[Check, str] = {}  # check -> what it allows, for `fedapp keys`


def allows(text: str) -> Callable[[Check], Check]:
    """Record what a check allows (`fedapp keys` prints it)."""

    def record(check: Check) -> Check:
        ALLOWED[check] = text
        return check

    return record


def rule(text: str, ok: Callable[[Any], bool]) -> Check:
    """A check allowing the values ``ok`` accepts; ``text`` says which (in the error and `fedapp keys`)."""
    return allows(text)(lambda v: None if ok(v) else text)


def one_of(*allowed: str) -> Check:
    return rule(f"one of {', '.join(allowed)}", lambda v: v in allowed)


positive = rule("a number > 0", lambda v: v > 0)
non_negative = rule("a number >= 0", lambda v: v >= 0)
fraction = rule("a number in (0, 1]", lambda v: 0 < v <= 1)
unit_interval = rule("a number in [0, 1]", lambda v: 0 <= v <= 1)
half_open_unit = rule("a number in [0, 1)", lambda v: 0 <= v < 1)
finite = rule("a finite number", math.isfinite)


def shown(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def number_in(lo: float, hi: float, low_open: bool = False) -> Check:
    """A float key's range; every float key has one, so a finite extreme (1e300) stops the run here."""
    text = f"a number in {'(' if low_open else '['}{shown(lo)}, {shown(hi)}]"
    return rule(text, lambda v: (lo < v if low_open else lo <= v) and v <= hi)


def integer_in(lo: int, hi: int) -> Check:
    return rule(f"an integer in {lo}..{hi}", lambda v: lo <= v <= hi)


# Ranges of the run-config's numbers (docs/faults.md, "Run-config ranges"): each allows every value a
# published setting uses by orders of magnitude and refuses what only overflows float32 or never ends.
MAX_ROUNDS = 10**6  # rounds, round multiples, schedule lengths
MAX_EPOCHS = 10**4  # local passes over a client's data
MAX_COUNT = 10**7  # samples, clients, steps, batch sizes (the data and the model bound them further)
MAX_LR = 100.0  # client and server learning rates, mask-score learning rate
MAX_SECONDS = 30 * 86400.0  # round and discovery timeouts: 30 days


AUTO_LOCAL_TEST = -1.0
# PFLlib (train_size = 0.75) and FL-bench (test_ratio = 0.25) both hold out a quarter of each
# client's own samples as its local test split; personalised runs here do the same by default.
PERSONAL_LOCAL_TEST = 0.25


local_test_check = rule("a number in [0, 1), or -1 (auto)", lambda v: v == AUTO_LOCAL_TEST or 0 <= v < 1)


@allows("comma-separated positive integers such as '32,64'")
def int_list(v: Any) -> str | None:
    ok = re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", str(v)) and all(int(x) > 0 for x in str(v).split(","))
    return None if ok else "comma-separated positive integers such as '32,64'"


SEED_MAX = 2**32 - 1  # numpy's legacy seeding and scikit-learn's random_state take 32-bit seeds


seed_range = rule(f"an integer in 0..{SEED_MAX}", lambda v: 0 <= v <= SEED_MAX)


MAX_THREADS = 1024  # more than the hardware threads of any machine this runs on; torch makes a thread per unit


thread_count = rule(f"an integer in 1..{MAX_THREADS}", lambda v: 1 <= v <= MAX_THREADS)


SYSTEM_ROOTS = ("/dev", "/proc", "/sys")


@allows("a folder path without '..' outside /dev, /proc and /sys (or empty)")
def folder_check(v: Any) -> str | None:
    """A folder a run-config names (written by whoever submits the run, not the node's operator):
    no '..' component, not a device or system area, not a file."""
    if not v:
        return None
    path = Path(str(v))
    allowed = "a folder path without '..' outside /dev, /proc and /sys (or empty)"
    if ".." in path.parts:
        return allowed
    real = path.resolve()
    if any(real == Path(r) or Path(r) in real.parents for r in SYSTEM_ROOTS) or (real.exists() and not real.is_dir()):
        return allowed
    return None


@allows("comma-separated numbers in (0, 1]")
def float_list(v: Any) -> str | None:
    try:
        vals = [float(x) for x in str(v).split(",")]
    except ValueError:
        return "comma-separated numbers such as '0.2,0.4,1.0'"
    return None if vals and all(0 < x <= 1 for x in vals) else "comma-separated numbers in (0, 1]"


@allows("auto, none, external, jetson, rapl, nvml, or distinct back ends joined by '+' such as 'rapl+nvml'")
def energy_meter_check(v: Any) -> str | None:
    parts = str(v).split("+")
    if v in ("auto", "none", "external") or (all(p in ("jetson", "rapl", "nvml") for p in parts) and len(set(parts)) == len(parts)):
        return None
    return "auto, none, external, jetson, rapl, nvml, or distinct back ends joined by '+' such as 'rapl+nvml'"


MLFLOW_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "databricks")


@allows("empty (off), local (<run-dir>/mlflow.db), or an MLflow tracking URI: sqlite:////abs/path.db, http(s)://host:port, ...")
def mlflow_uri_check(v: Any) -> str | None:
    """Syntax only; a relative path would resolve against whichever folder the server process runs in."""
    text = str(v)
    scheme = text.split(":", 1)[0] if ":" in text else ""
    if text in ("", "local") or (scheme in MLFLOW_SCHEMES and (scheme != "sqlite" or text.startswith("sqlite:////"))):
        return None
    return (
        "empty, local, or a tracking URI with scheme "
        + ", ".join(MLFLOW_SCHEMES)
        + " (sqlite with an absolute path: sqlite:////abs/path.db)"
    )


DEVICE_RE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


@allows("auto, cpu, cuda, cuda:N (N = 0, 1, ...) or mps")
def device_check(v: Any) -> str | None:
    """Syntax only; fedapp.core.device checks that the machine has the device (where it trains)."""
    return None if DEVICE_RE.fullmatch(str(v)) else "auto, cpu, cuda, cuda:N (N = 0, 1, ...) or mps"


@allows("auto or a whole number >= 1")
def client_batch_check(v: Any) -> str | None:
    """A count or ``auto`` (sized at run time): ``client-batch``, ``engine-workers``."""
    return None if re.fullmatch(r"auto|[1-9]\d*", str(v)) else "auto or a whole number >= 1"


@allows("empty (start a local Ray) or a Ray cluster address such as 10.0.0.1:6379, auto or ray://host:10001")
def ray_address_check(v: Any) -> str | None:
    ok = re.fullmatch(r"|auto|(ray://)?[A-Za-z0-9._-]+:\d{1,5}", str(v))
    return None if ok else "empty (start a local Ray) or a Ray cluster address such as 10.0.0.1:6379, auto or ray://host:10001"


PARTITION_RE = re.compile(r"^\s*\d+(\s*,\s*\d+)*(\s*\|\s*\d+(\s*,\s*\d+)*)*\s*$")


@allows("iid, dirichlet, pathological, shard, source, or explicit class groups per client such as '0,1|2,3'")
def partition_check(v: Any) -> str | None:
    if v in ("iid", "dirichlet", "pathological", "shard", "source") or PARTITION_RE.match(str(v)):
        return None
    return "iid, dirichlet, pathological, shard, source, or explicit class groups per client such as '0,1|2,3'"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Keys every run understands (the foundation contract)."""

    method: str = key("fedavg", doc="the federated method (fedapp.methods.registry); its own keys: `fedapp keys METHOD`")
    base: str = key("fedavg", one_of("fedavg", "fedprox"), "base optimizer a warmup/partial method falls back on")
    dataset: str = key(
        "digits", doc="synthetic-32k, synthetic-3.2k, digits, mnist, emnist, cifar10, cifar100, MedMNIST names, cifar-mnist, ..."
    )
    data_seed: int = key(0, seed_range, "seed of data generation and partitioning")
    data_root: str = key(
        "", folder_check, "folder with downloaded datasets (real-data loaders); `fedapp data fetch` fills it; a node's own wins"
    )
    normalize: str = key(
        "auto", one_of("auto", "none", "half", "imagenet", "cifar100", "train-stats"), "image normalisation; auto: the dataset's default"
    )
    augment: str = key(
        "auto", one_of("auto", "none", "crop-flip", "flip-rotate-crop"), "training augmentation; auto: the dataset's default"
    )
    input_noise: float = key(
        0.0, number_in(0, 100), "std of Gaussian noise added once to every input (train and test), drawn with data-seed"
    )
    partition: str = key("dirichlet", partition_check)
    dirichlet_alpha: float = key(0.5, number_in(1e-3, 1e6), "Dirichlet concentration: 0.001 about one class per client, 1e6 about IID")
    classes_per_client: int = key(2, integer_in(1, 1000))
    min_partition_size: int = key(10, integer_in(0, MAX_COUNT), "Dirichlet: resample until every client has this many samples")
    num_clients: int = key(
        0, integer_in(0, MAX_COUNT), "clients (partitions); 0: as many as the federation's nodes report (num-partitions)"
    )
    local_test_fraction: float = key(
        AUTO_LOCAL_TEST, local_test_check,
        "share of each client's data held out as its local test split; -1: 0.25 where clients are evaluated on it "
        "(personalised methods, personalized-eval), else 0",
    )  # fmt: skip
    samples_per_client: int = key(0, integer_in(0, MAX_COUNT), "shard partition: training samples kept per client (0: whole shards)")
    local_test_source: str = key(
        "own-data", one_of("own-data", "test-set"),
        "own-data: rest of the client's shards, else local-test-fraction of its data; test-set: its shards of the test set",
    )  # fmt: skip
    personalized_eval: bool = key(False, doc="evaluate every client on its local test split each round (on for personalised methods)")
    personalized_eval_every: int = key(
        1, integer_in(1, MAX_ROUNDS), "personalised evaluation (every client) in rounds that are multiples of this, and in the last round"
    )
    model: str = key("mlp", doc="network (fedapp.models.registry)")  # a registry name: methods.registry.resolve checks it
    mlp_hidden: str = key("64,64", int_list, "hidden widths of the MLP", numbers=(int,))
    num_server_rounds: int = key(10, integer_in(1, MAX_ROUNDS))
    local_epochs: int = key(1, integer_in(0, MAX_EPOCHS))
    local_steps: int = key(0, integer_in(0, MAX_COUNT), "if > 0, train this many minibatch steps instead of epochs")
    batch_size: int = key(32, integer_in(1, MAX_COUNT))
    optimizer: str = key("sgd", one_of("sgd", "adam"))
    lr: float = key(0.05, number_in(0, MAX_LR, low_open=True))
    momentum: float = key(0.0, half_open_unit)
    weight_decay: float = key(0.0, number_in(0, 1), "L2 weight decay (SGD: also lr x (weight-decay + proximal-mu) < 2 x (1 + momentum))")
    server_lr: float = key(1.0, number_in(0, MAX_LR, low_open=True), "global learning rate applied to the pseudo-gradient")
    aggregation: str = key(
        "mean", one_of("mean", "trimmed-mean", "median", "norm-bound"),
        "how each coordinate's contributors are combined: the weighted mean, or a rule that limits what a minority "
        "of bad clients can do (docs/faults.md)",
    )  # fmt: skip
    trim_fraction: float = key(
        0.2, rule("a number in (0, 0.5)", lambda v: 0 < v < 0.5),
        "trimmed-mean: share of each coordinate's values dropped at each end (the median where that drops none)",
    )  # fmt: skip
    norm_bound_factor: float = key(
        2.0, number_in(0, 1000, low_open=True),
        "norm-bound: each reply's update is scaled down to at most this multiple of the round's median update norm",
    )  # fmt: skip
    proximal_mu: float = key(0.01, number_in(0, MAX_LR), "FedProx proximal weight, used when method or base is fedprox")
    client_weighting: str = key("num-examples", one_of("num-examples", "uniform"))
    fraction_train: float = key(1.0, fraction, "share of clients sampled per round")
    min_replies: int = key(1, integer_in(1, MAX_COUNT), "fewest replies a round aggregates; fewer leaves the model unchanged")
    round_timeout: float = key(3600.0, number_in(0, MAX_SECONDS, low_open=True), "seconds the server waits for replies each round")
    resume: bool = key(False, doc="continue the run in run-dir from its last checkpointed round (after a SuperLink restart)")
    overwrite: bool = key(False, doc="replace the results already in run-dir (without it, or resume, a run refuses such a folder)")
    discovery_timeout: float = key(
        120.0, number_in(0, MAX_SECONDS, low_open=True), "seconds the server waits at the start for every partition's node"
    )
    state_store: str = key(
        "auto", one_of("auto", "context", "disk"), "where client state lives between rounds; auto: disk where the node sets state-dir"
    )
    wire_dtype: str = key(
        "float32", one_of("float32", "float16", "bfloat16"),
        "how float32 tensors travel, both ways: as they are, or as 16-bit values (the server still averages in float64 "
        "and keeps a float32 model; masks, integer buffers and method records are unchanged)",
    )  # fmt: skip
    downlink: str = key(
        "full", one_of("full", "selected"),
        "what a train message carries: the full global model, or only the tensors changed since the model the node last "
        "received, completed from the node's model cache and checked against the server's digest (docs/downlink.md)",
    )  # fmt: skip
    num_threads: int = key(1, thread_count, "torch/BLAS threads per client process")
    device: str = key("auto", device_check, "torch device to train on; auto: CUDA, else MPS, else CPU; a node's node-config device wins")
    deterministic: bool = key(
        False, doc="reproducible GPU runs: deterministic algorithms only, a fixed cuBLAS workspace, cuDNN benchmarking off (slower); "
        "false: cuDNN times its convolution algorithms and keeps the fastest"
    )  # fmt: skip
    client_batch: str = key(
        "1", client_batch_check,
        "in-process engine (fedapp run) only: train a round's clients this many at a time as one vectorised computation "
        "(docs/batched.md); auto: sized to the device; 1: one at a time; flwr run and deployments ignore it",
        numbers=(int,),
    )  # fmt: skip
    engine_workers: str = key(
        "1", client_batch_check,
        "in-process engine (fedapp run) only: Ray actors that run the round's client messages (docs/engine-workers.md), "
        "each with num-threads CPUs or one GPU; auto: the Ray cluster's GPUs, else its CPUs / num-threads; 1: no Ray",
        numbers=(int,),
    )  # fmt: skip
    ray_address: str = key(
        "", ray_address_check, "engine-workers > 1: the Ray cluster to join (ray start's address); empty: start a local Ray"
    )
    batch_fallback: str = key(
        "sequential", one_of("sequential", "error"),
        "client-batch > 1: a chunk the batched kernel fails on trains one client at a time (sequential) or stops the run (error); "
        "either way the round's row counts it",
    )  # fmt: skip
    seed: int = key(0, seed_range)
    run_dir: str = key("", doc="results folder; empty: a new folder per run, runs/<UTC time>-<method>-<dataset>-<4 hex>")
    target_accuracy: float = key(0.99, unit_interval, "accuracy the report counts rounds (and joules) to")
    energy_meter: str = key("auto", energy_meter_check, "power/energy meter each client samples (docs/energy.md)")
    energy_interval: float = key(0.1, number_in(1e-3, 3600), "seconds between background meter readings")
    energy_rails: str = key(
        "", numbers=(int,), doc="Jetson rails / RAPL domains / NVML GPU indices to sum, comma-separated; empty: the meter's default"
    )
    tensorboard: bool = key(False, doc="also write each round's metrics to <run-dir>/tensorboard (needs the tensorboard package)")
    mlflow_uri: str = key("", mlflow_uri_check, "also log the config and each round's metrics to MLflow (needs mlflow); empty: off")

    @property
    def hidden_widths(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.mlp_hidden.split(","))


T = TypeVar("T")


def kebab(name: str) -> str:
    return name.replace("_", "-")


def fields_of(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {kebab(f.name): f for f in dataclasses.fields(cls)}


def defaults_of(cls: type) -> dict[str, Scalar]:
    return {k: f.default for k, f in fields_of(cls).items()}  # type: ignore[misc]


def coerce(name: str, value: Any, default: Scalar, numbers: tuple[type, ...] = ()) -> Scalar:
    """``value`` as the default's type; a text key takes text only (``numbers``: also these number types)."""
    want = type(default)
    if want is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise ConfigError(f"run-config key '{name}' = {value!r}: expected true or false")
    if want is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            try:
                return int(str(value))
            except ValueError:
                raise ConfigError(f"run-config key '{name}' = {value!r}: expected an integer") from None
        return int(value)
    if want is float:
        if isinstance(value, bool):
            raise ConfigError(f"run-config key '{name}' = {value!r}: expected a number")
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"run-config key '{name}' = {value!r}: expected a number") from None
    if isinstance(value, str | os.PathLike):  # a Path from a Python caller (scripts pass run-dir so)
        return os.fspath(value)  # type: ignore[return-value]
    if isinstance(value, numbers) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"run-config key '{name}' = {value!r} is not allowed: expected text (quote it: {name}='...')")


def parse(cls: type[T], raw: Mapping[str, Any]) -> T:
    """Build ``cls`` from the keys of ``raw`` it declares (others are ignored here)."""
    values: dict[str, Any] = {}
    for name, f in fields_of(cls).items():
        v = coerce(name, raw[name], cast(Scalar, f.default), f.metadata.get("numbers", ())) if name in raw else f.default
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"run-config key '{name}' = {v!r} is not allowed: expected a finite number")
        check = f.metadata.get("check")
        if check is not None and (allowed := check(v)) is not None:
            raise ConfigError(f"run-config key '{name}' = {v!r} is not allowed: expected {allowed}")
        values[f.name] = v
    return cls(**values)


def check_known(raw: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        close = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in unknown}
        hints = "".join(f" (did you mean {c[0]!r} for {k!r}?)" for k, c in close.items() if c)
        raise ConfigError(f"unknown run-config key(s) {', '.join(unknown)}{hints}; `fedapp keys` lists every key with its doc")


def allowed_of(f: dataclasses.Field[Any]) -> str:
    """What a key allows, in words: its check's text, else its type's."""
    check = f.metadata.get("check")
    if check is not None:
        return ALLOWED.get(check, "")
    return {bool: "true or false", int: "an integer", float: "a number"}.get(type(f.default), "text")


def load_toml_config(path: str | Path) -> dict[str, Any]:
    """Read a run-config TOML file (flat kebab-case keys, as `flwr run --run-config` takes)."""
    import tomllib

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"run-config file {str(p)!r} does not exist")
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"run-config file {str(p)!r} is not valid TOML: {err}") from None
    return flatten(data)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def parse_overrides(text: str) -> dict[str, Any]:
    """Parse ``"k1=v1 k2='v 2'"`` the way `flwr run --run-config` does: a quoted value is text
    (``run-dir='5'``), an unquoted one a TOML value, or text where TOML cannot read it."""
    import shlex
    import tomllib

    out: dict[str, Any] = {}
    try:
        items = shlex.split(text)
    except ValueError as err:  # shlex: "No closing quotation", "No escaped character"
        raise ConfigError(f"run-config overrides {text!r} cannot be split into key=value items: {err}") from None
    quoted = set(re.findall(r"(?:^|\s)([^\s=]+)=['\"]", text))
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        k, v = item.split("=", 1)
        if k in quoted:
            out[k] = v
            continue
        try:
            out[k] = tomllib.loads(f"x = {v}")["x"]
        except tomllib.TOMLDecodeError:
            out[k] = v
    return out


def overrides_of(items: list[str]) -> dict[str, object]:
    """TOML files and "key=value ..." strings, applied in order."""
    overrides: dict[str, object] = {}
    for item in items:
        overrides.update(load_toml_config(item) if Path(item).suffix == ".toml" else parse_overrides(item))
    return overrides
