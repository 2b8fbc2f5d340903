#!/usr/bin/env bash
# The oldest-torch leg: the test suite without its Flower-process and slow tests, on the oldest
# torch/torchvision pyproject.toml declares (the Jetson image's: torch 2.6 + torchvision 0.21) and
# Python 3.12 (the Jetson image's). Run before each release; the result is recorded in docs/results.md
# ("Foundation: the oldest torch"). Not in CI: it installs a second environment (~4 GB with PyPI's CUDA wheels) and
# runs for minutes, past the suite's budget.
#
#   scripts/test-oldest-torch.sh [pytest args]     e.g. -n 0 tests/test_train.py
#
# OLDEST_TORCH_PYTHON (default python3.12), OLDEST_TORCH_VENV (default ~/.cache/fedapp/venvs/oldest-torch),
# OLDEST_TORCH_INDEX (default: PyPI, plus the PyTorch CPU index where it is reachable: CPU wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=2.6.0 VISION=0.21.0
PY=${OLDEST_TORCH_PYTHON:-python3.12}
venv=${OLDEST_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fedapp/venvs/oldest-torch}
index=${OLDEST_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
if [ ! -x "$venv/bin/python" ] || [ "$("$venv/bin/python" -c 'import fedapp, torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" != "$TORCH" ]; then
  "$PY" -m venv "$venv"
  # the lock's versions for everything but the torch stack (and sympy/mpmath, which torch 2.6 pins itself)
  grep -vE '^(torch|torchvision|triton|sympy|mpmath|nvidia-(cu|nccl|nvjit|nvshmem|nvtx).*|cuda-.*)==' requirements-lock.txt > "$venv/constraints.txt"
  extra=()
  if [ -n "$index" ] && "$venv/bin/python" -c "import urllib.request as u; u.urlopen('$index/', timeout=10)" 2>/dev/null; then
    extra=(--extra-index-url "$index")
  fi
  "$venv/bin/python" -m pip install -q ${extra[@]+"${extra[@]}"} "torch==$TORCH" "torchvision==$VISION" -c "$venv/constraints.txt" -e ".[dev]"
fi
"$venv/bin/python" -c "import sys, torch, torchvision, numpy, flwr; print('python', sys.version.split()[0], 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'numpy', numpy.__version__, 'flwr', flwr.__version__)"
start=$(date +%s)
status=0
PYTHONPATH="$PWD" "$venv/bin/python" -m pytest -m "not slow and not flwr" -q -p no:cacheprovider "$@" || status=$?
echo "oldest-torch leg: exit $status after $(( $(date +%s) - start )) s"
exit $status
