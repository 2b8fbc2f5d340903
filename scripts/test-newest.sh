#!/usr/bin/env bash
# The newest leg: the whole test suite (slow tests aside, as CI) in an environment of the newest
# releases pyproject.toml's ranges allow (flwr, torch, torchvision and every other package, resolved
# afresh, not from requirements-lock.txt), beside scripts/test-oldest-torch.sh's oldest. Run before
# each release; the result is recorded in docs/results.md ("Foundation: the newest Flower and torch").
# Not in CI: it installs a second environment (PyPI's CUDA torch, several GB) and runs past the suite's budget.
#
#   scripts/test-newest.sh [pytest args]     e.g. -n 0 tests/test_train.py
#
# NEWEST_PYTHON (default python3.11, CI's), NEWEST_VENV (default ~/.cache/fedapp/venvs/newest),
# NEWEST_REFRESH=1 re-resolves the environment (new releases); otherwise it is built once.
# A pip configuration that caps versions through a constraints file (PIP_CONSTRAINT or pip.conf's
# `constraint`) is lifted for this environment's pip calls only: PIP_CONSTRAINT names an empty file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${NEWEST_PYTHON:-python3.11}
venv=${NEWEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fedapp/venvs/newest}
stamp="$venv/.fedapp-newest"   # the checkout it was built for, written once the install succeeded
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$PWD" ] || [ "${NEWEST_REFRESH:-0}" = 1 ]; then
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  : > "$venv/no-constraints.txt"
  PIP_CONSTRAINT="$venv/no-constraints.txt" "$venv/bin/python" -m pip install -q --upgrade --upgrade-strategy eager pip -e ".[dev]"
  printf %s "$PWD" > "$stamp"
fi
"$venv/bin/python" -c "import sys, torch, torchvision, numpy, flwr; print('python', sys.version.split()[0], 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'numpy', numpy.__version__, 'flwr', flwr.__version__)"
start=$(date +%s)
status=0
# the environment scripts/flwr-env.sh gives, with this leg's tools first on PATH; PYTHONPATH as the oldest leg
# shellcheck source=/dev/null
source scripts/flwr-env.sh
PATH="$venv/bin:$PATH" PYTHONPATH="$PWD" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" || status=$?
echo "newest leg: exit $status after $(( $(date +%s) - start )) s"
exit $status
