"""What the light entry points import: each runs in a fresh interpreter, which then
reports the heavy packages it loaded. `import client_app` (paid before Flower's
simulation starts Ray), the query handler (every node's first message), `fedapp --help`,
`fedapp data --help` and `fedapp report` must not load torch, torchvision, scikit-learn
or Flower Datasets; a partition loads the partitioners without flwr_datasets' plotting
stack, and still equals the split made with the package imported as usual."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fedapp.methods.registry import MODULES  # light: imports no method module

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchvision", "sklearn", "flwr_datasets", "datasets", "scipy")


def loaded_after(code: str) -> dict[str, bool]:
    """Run ``code`` in a fresh interpreter at the project root; which HEAVY modules it loaded."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r} + ('matplotlib', 'seaborn')}}))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def heavy(loaded: dict[str, bool]) -> list[str]:
    return [m for m in HEAVY if loaded[m]]


def test_importing_the_client_app_loads_no_heavy_package() -> None:
    assert heavy(loaded_after("import client_app")) == []


def test_the_query_handler_loads_no_heavy_package() -> None:
    """On a node set to train on the CPU; ``auto`` (the default) imports torch to look for a GPU."""
    code = """
from flwr.app import ConfigRecord, MessageType, RecordDict
from fedapp.client_app import app
from fedapp.engine.local_grid import LocalGrid
grid = LocalGrid(app, {"num-clients": 2, "energy-meter": "none", "device": "cpu"}, 2)
msg = grid.create_message(RecordDict({"config": ConfigRecord({})}), MessageType.QUERY, 1001, "0")
reply = grid.send_and_receive([msg])[0]
assert not reply.has_error(), reply.error
assert reply.content["info"]["partition-id"] == 1, dict(reply.content["info"])
"""
    assert heavy(loaded_after(code)) == []


def test_fedapp_help_loads_no_heavy_package() -> None:
    code = """
import contextlib, io
from fedapp.cli import main
for argv in (["--help"], ["data", "--help"], ["run", "--help"], ["report", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit as done:
            assert done.code == 0
    assert "usage: fedapp" in out.getvalue()
"""
    assert heavy(loaded_after(code)) == []


def test_fedapp_report_loads_no_torch_sklearn_or_flower_datasets(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "fedavg", "seed": 0, "target-accuracy": 0.5}))
    rows = [{"round": r, "accuracy": 0.3 * r, "loss": 1.0, "bytes_up": 10, "bytes_down": 10, "seconds": 0.1} for r in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = f"""
import contextlib, io
from fedapp.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["report", {str(run)!r}, "--out", {str(tmp_path / "report")!r}]) == 0
"""
    loaded = loaded_after(code)
    assert heavy(loaded) == [] and loaded["matplotlib"]
    assert (tmp_path / "report" / "accuracy.png").stat().st_size > 0


def test_a_partition_skips_flower_datasets_plotting_and_matches_the_usual_import(tmp_path: Path) -> None:
    labels = "np.random.default_rng(3).integers(0, 10, 1200)"
    split = f"""
import numpy as np
from fedapp.data.partition import partition_indices
parts = partition_indices("dirichlet", {labels}, 8, 0, alpha=0.3)
"""
    plotting = f"""{split}
import json, sys
plotting = [m for m in ("matplotlib", "seaborn") if m in sys.modules]
import flwr_datasets
assert flwr_datasets.FederatedDataset and flwr_datasets.__version__  # the package still works in full after
print(json.dumps(plotting))
"""

    def python(code: str, cache: str) -> str:  # each with its own empty index cache: the split is computed
        env = {"PATH": "/usr/bin:/bin", "FEDAPP_CACHE_DIR": str(tmp_path / cache)}
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout

    assert json.loads(python(plotting, "plotting")) == []
    lazy = python(split + "\nprint([p.tolist() for p in parts])", "lazy")
    usual = python("import flwr_datasets.partitioner\n" + split + "\nprint([p.tolist() for p in parts])", "usual")
    assert lazy == usual and len(json.loads(lazy)) == 8


def test_medmnist_names_are_read_without_the_package_and_equal_its_info() -> None:
    from fedapp.data import medmnist

    names = loaded_after("from fedapp.data import medmnist\nassert len(medmnist.names()) == 48")
    assert heavy(names) == []
    import medmnist.info as official

    assert medmnist.info() == {f: v for f, v in official.INFO.items() if not v["python_class"].endswith("3D")}


def methods_loaded_after(raw: dict[str, object]) -> list[str]:
    """Resolve ``raw`` in a fresh interpreter and build its server policy class; which registered
    method modules it then holds."""
    probe = f"""
import json, sys
from fedapp.methods.registry import MODULES, resolve
cfg, method, params = resolve({raw!r})
assert method.name == cfg.method and issubclass(method.server, object)
print(json.dumps(sorted(n for n, m in MODULES.items() if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_resolving_a_method_imports_no_other_method_module() -> None:
    assert methods_loaded_after({"method": "fedavg", "num-server-rounds": 2}) == ["fedavg"]
    assert methods_loaded_after({"method": "fjord", "es-lambda": 0.5}) == ["fjord"]
    # another method's key is told from a misspelt one by loading the others
    assert methods_loaded_after({"method": "fedavg", "es-lambda": 0.5}) == sorted(MODULES)
