#!/usr/bin/env bash
# Create the virtual environment (Python 3.11+) and install fedapp with the exact, tested dependency
# versions of requirements-lock.txt (pyproject.toml declares the supported ranges). Idempotent.
#
# Where: outside the project, linked as .venv (every script and test calls .venv/bin/...). `flwr run`
# walks every file under the project folder when it bundles the app (~50,000 in an environment:
# seconds per run); it does not enter a linked folder. Default: $FEDAPP_VENV_ROOT (default
# ~/.cache/fedapp/venvs)/<folder name>-<hash of this checkout's path>; FEDAPP_VENV=/path picks it. An
# existing .venv (folder or link) is used as it is. Environments of checkouts that no longer exist
# are removed from $FEDAPP_VENV_ROOT (each one records its checkout in .fedapp-checkout).
#
# What (README, "Install"):
#   FEDAPP_EXTRAS   pyproject extras to install, default "dev" (everything, as CI and the two commands);
#                   "" for a board (no Ray, no reports), "simulation,report" for a simulation user
#   FEDAPP_TORCH    "cpu": torch/torchvision from the PyTorch CPU index (no CUDA libraries; README, "Install")
#   FEDAPP_DEPLOY   "1": also the system packages of a deployment (nginx, scripts/system-packages.sh);
#                   scripts/test.sh sets it (the deployment tests start nginx)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd -P)"
if [ "${FEDAPP_DEPLOY:-0}" = 1 ]; then
  scripts/system-packages.sh
fi
PY=${PYTHON:-python3}
if [ ! -e .venv ] && [ ! -L .venv ]; then
  if command -v sha256sum >/dev/null 2>&1; then hash=$(printf %s "$root" | sha256sum); else hash=$(printf %s "$root" | shasum -a 256); fi
  venv_root=${FEDAPP_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/fedapp/venvs}
  target=${FEDAPP_VENV:-$venv_root/$(basename "$root")-${hash:0:12}}
  if [ -d "$venv_root" ]; then
    for old in "$venv_root"/*/; do
      marker="$old.fedapp-checkout"
      [ -f "$marker" ] || continue
      [ -f "$(cat "$marker")/pyproject.toml" ] || rm -rf "${old%/}"
    done
  fi
  [ -x "$target/bin/python" ] || "$PY" -m venv "$target"
  printf %s "$root" > "$target/.fedapp-checkout"
  ln -s "$target" .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
extras=${FEDAPP_EXTRAS-dev}
spec="."
[ -z "$extras" ] || spec=".[$extras]"
torch_index=()
[ "${FEDAPP_TORCH:-}" != cpu ] || torch_index=(--extra-index-url https://download.pytorch.org/whl/cpu)
stamp=.venv/.fedapp-installed
want="$spec ${FEDAPP_TORCH:-default}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements-lock.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q ${torch_index[@]+"${torch_index[@]}"} -c requirements-lock.txt -e "$spec"
  printf %s "$want" > "$stamp"
fi
