"""The apps live in the package; the top-level client_app.py / server_app.py are only what Flower
loads from the app directory, and installing fedapp puts no top-level module into site-packages."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"client_app", "server_app"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_in_the_package_imports_a_top_level_app_module() -> None:
    offenders = {str(p.relative_to(ROOT)) for p in (ROOT / "fedapp").rglob("*.py") if imported_modules(p) & TOP_LEVEL}
    assert offenders == set()


def test_packaging_lists_no_py_modules_and_flower_loads_the_thin_top_level_files() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py-modules" not in project["tool"].get("setuptools", {})
    assert project["tool"]["flwr"]["app"]["components"] == {"serverapp": "server_app:app", "clientapp": "client_app:app"}
    code = "import client_app, server_app, fedapp.client_app, fedapp.server_app as s; "
    code += "assert client_app.app is fedapp.client_app.app and server_app.app is s.app"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=300)


def without_the_checkout_on_pythonpath(cwd: Path) -> dict[str, str]:
    """This environment less the PYTHONPATH entries naming this checkout (a worktree's shell and
    scripts/test-oldest-torch.sh put it there so that its code is imported): that entry is the app
    directory itself, and what is left is the install."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and (cwd / p).resolve() != ROOT]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(entries)}


def test_outside_the_app_directory_no_top_level_app_module_is_importable(tmp_path: Path) -> None:
    code = "import importlib.util as u; print([m for m in ('client_app', 'server_app') if u.find_spec(m)])"
    env = without_the_checkout_on_pythonpath(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_client_code_imports_no_server_module() -> None:
    """The client side (client/handlers.py, the ClientApp, the query handler) reaches nothing of the server's."""
    server_side = {
        "fedapp.server.strategy",
        "fedapp.server.loop",
        "fedapp.server_app",
        "fedapp.server.roster",
        "fedapp.server.reply_checks",
    }
    for name in ("client/handlers.py", "client_app.py", "client/node_query.py", "client/cache.py"):
        tree = ast.parse((ROOT / "fedapp" / name).read_text())
        used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert used & server_side == set(), name
