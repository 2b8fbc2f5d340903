#!/usr/bin/env bash
# Set up, then lint (ruff), type-check (mypy) and run the test suite (pytest, slow tests excluded).
# Paper reproductions: scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
FEDAPP_DEPLOY=1 scripts/setup.sh   # with nginx: the deployment tests start it
source scripts/flwr-env.sh
ruff check .
ruff format --check .
mypy .
pytest "$@"
