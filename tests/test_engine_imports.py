"""The engine knows no method: no module of ``fedapp/engine`` imports ``fedapp.methods`` (nor, at
import time, anything that does) or names one, so a method's batched kernel can only reach the
engine through the park point's registry (``batched/seam.py``) and its chunk's memory through
``ClientPolicy.chunk_memory``. The in-process run's entry (``fedapp run``), which resolves the
run's method and collects every method's key defaults, is ``fedapp/sim/run_local.py``, above the
engine; no engine module is exempt."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "fedapp" / "engine"
FORBIDDEN = "fedapp.methods"
NOT_A_METHOD = {("ray_workers.py", "local")}  # Ray's address "local" (a new Ray), not the method


def imported(text: str, package: str) -> set[str]:
    """Every module an ``import`` or ``from ... import`` anywhere in ``text`` names (function bodies and
    ``TYPE_CHECKING`` blocks included; relative imports resolved against ``package``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)  # `from fedapp import methods`
    return out


def engine_modules() -> list[Path]:
    return sorted(ENGINE.glob("*.py"))


def offending(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == FORBIDDEN or m.startswith(FORBIDDEN + "."))


def test_no_engine_module_imports_a_method_module() -> None:
    files = engine_modules()
    assert {p.name for p in files} >= {"batched_executor.py", "local_grid.py", "client_batch_size.py"}
    found = {p.name: offending(imported(p.read_text(), "fedapp.engine")) for p in files}
    assert {name: mods for name, mods in found.items() if mods} == {}


def named_methods(text: str) -> set[str]:
    """The registered method names that ``text`` holds as a string constant (``cfg.method == "fedpews"``)."""
    from fedapp.methods.registry import MODULES

    return {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and n.value in MODULES}


def test_no_engine_module_names_a_method() -> None:
    """What a method adds to a chunk reaches ``client-batch = auto`` from the method (``ClientPolicy.chunk_memory``)."""
    found = {p.name: {n for n in named_methods(p.read_text()) if (p.name, n) not in NOT_A_METHOD} for p in engine_modules()}
    assert {name: names for name, names in found.items() if names} == {}
    sizing = (ENGINE / "client_batch_size.py").read_text()
    assert named_methods(sizing + '\nWARMUP = cfg.method == "fedpews"\n') == {"fedpews"}  # the scan's own check


def test_the_scan_finds_late_and_relative_imports() -> None:
    """The scan's own check: an import inside a function (which a look at a file's head misses) and a
    relative one, added to the executor's real text, are found; the text as it stands has none."""
    text = (ENGINE / "batched_executor.py").read_text()
    assert offending(imported(text, "fedapp.engine")) == []
    late = text + "\n\ndef _late() -> None:\n    from fedapp.methods import pews_kernel\n"
    assert offending(imported(late, "fedapp.engine")) == ["fedapp.methods", "fedapp.methods.pews_kernel"]
    relative = text + "\nfrom ..methods.pews_train import WarmupLoop\n"
    assert offending(imported(relative, "fedapp.engine")) == ["fedapp.methods.pews_train", "fedapp.methods.pews_train.WarmupLoop"]


def test_importing_the_engine_loads_no_method_module() -> None:
    """In a fresh interpreter: importing every engine module loads no ``fedapp.methods`` module."""
    names = [f"fedapp.engine.{p.stem}" for p in engine_modules() if p.stem != "__init__"]
    code = f"import json, sys\nfor n in {names!r}:\n    __import__(n)\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "fedapp.engine.batched_executor" in loaded
    assert offending(set(loaded)) == []
