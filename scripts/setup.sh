#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install fedapp with its pinned dependencies. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-packages.sh
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fedapp-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev]"
  touch "$stamp"
fi
