#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install fedapp with the exact, tested dependency versions of
# requirements-lock.txt (pyproject.toml declares the supported ranges). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-packages.sh
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fedapp-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements-lock.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c requirements-lock.txt -e ".[dev]"
  touch "$stamp"
fi
