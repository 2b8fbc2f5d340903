#!/usr/bin/env bash
# Fill ./.whl (git-ignored) with the wheels the GPU checks (bench/gpu_checks.sh) need on a GPU machine
# that has no internet, beyond what its image brings: Python 3.12, CUDA torch + torchvision, numpy,
# scikit-learn, pyarrow, grpcio, protobuf, rich, typer, matplotlib, nvidia-ml-py. Versions are the ones
# requirements-lock.txt pins. Ray is left out (its wheel is too large to carry), so the checks use the
# in-process engine and a real SuperLink + SuperNodes, never `flwr run` with Ray.
#   scripts/gpu_wheels.sh            # then carry .whl along; bench/gpu_checks.sh installs from it
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qsx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
# What flwr (and flwr-datasets' partitioners, medmnist) need that the GPU image lacks.
PKGS=(flwr flwr-datasets datasets dill multiprocess medmnist fire termcolor cryptography cffi pycparser
      pycryptodome iterators sqlalchemy greenlet alembic mako fastapi starlette uvicorn pydantic pydantic-core
      annotated-types typing-inspection tomli tomli-w prompt-toolkit wcwidth grpcio-health-checking pathspec)
args=()
for p in "${PKGS[@]}"; do
  pin=$(grep -iE "^${p//-/[-_]}==" requirements-lock.txt | head -1 || true)
  [ -n "$pin" ] || { echo "gpu_wheels: $p has no pin in requirements-lock.txt" >&2; exit 1; }
  args+=("$pin")
done
rm -rf .whl && mkdir .whl
PIP=${PIP:-python3 -m pip}
$PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "${args[@]}"
mib=$(du -sm .whl | cut -f1)
echo "gpu_wheels: $(ls .whl | wc -l) wheels, ${mib} MiB in .whl/"
[ "$mib" -le 64 ] || { echo "gpu_wheels: ${mib} MiB is over the 64 MiB a device call carries" >&2; exit 1; }
