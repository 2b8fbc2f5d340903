#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install fedapp with the exact, tested dependency versions of
# requirements-lock.txt (pyproject.toml declares the supported ranges). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-packages.sh
PY=${PYTHON:-python3}
# FEDAPP_VENV=/path/outside/the/project: create the environment there and link .venv to it. `flwr run`
# walks every file under the project folder when it bundles the app (~50,000 in a .venv: seconds per run);
# it does not enter a linked folder.
if [ -n "${FEDAPP_VENV:-}" ] && [ ! -e .venv ]; then
  [ -x "$FEDAPP_VENV/bin/python" ] || "$PY" -m venv "$FEDAPP_VENV"
  ln -s "$FEDAPP_VENV" .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fedapp-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements-lock.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c requirements-lock.txt -e ".[dev]"
  touch "$stamp"
fi
