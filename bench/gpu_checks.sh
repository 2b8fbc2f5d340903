#!/bin/bash
# The checks that need an NVIDIA GPU, one command each, on a GPU machine whose image has Python,
# CUDA torch and torchvision but not Flower. Before copying the project there, fill .whl/ here with
#   scripts/gpu_wheels.sh           # the wheels the checks need beyond the image (pins from requirements-lock.txt)
# and carry .whl/ along; they are installed into .site/ on first use. Ray is not among them (its wheel
# is too large to carry), so these checks use the in-process engine and a real SuperLink + SuperNodes.
#   bash bench/gpu_checks.sh round       # bench/gpu_round.py: engine vs plain loop, 50 x 512, cnn + resnet8
#   bash bench/gpu_checks.sh batched     # bench/batched_round.py: one-at-a-time vs batched kernel, 50 clients
#   bash bench/gpu_checks.sh deploy      # bench/gpu_deploy_energy.sh: loopback deployment, NVML joules, ES savings
#   bash bench/gpu_checks.sh accuracy    # bench/gpu_vs_cpu.py: same-seed GPU vs CPU accuracy, 5 methods
#   bash bench/gpu_checks.sh determinism # bench/gpu_determinism.py: two same-seed GPU runs, deterministic off and on
#   bash bench/gpu_checks.sh all         # each of the above; exits non-zero if any of them failed
# On a machine without a GPU, DEVICE=cpu runs the same entries on the CPU (tests/test_gpu_checks.py
# runs each for one step that way; the deploy entry's test is slow-marked: tests/test_gpu_checks_deploy.py).
set -eu
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/.site:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=$PWD/.site/bin:$PATH PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if ! "$PY" -c "import flwr" 2>/dev/null; then
  [ -d .whl ] || { echo "flwr is missing and there is no .whl/ folder: run scripts/gpu_wheels.sh where pip reaches PyPI and carry .whl/" >&2; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
fi
DEVICE=${DEVICE:-cuda}
"$PY" -c "import torch, flwr; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'flwr', flwr.__version__)"
check() {
  case "$1" in
    round) "$PY" bench/gpu_round.py --device "$DEVICE" ${ROUND_ARGS:-} ;;
    batched) "$PY" bench/batched_round.py --device "$DEVICE" ${BATCHED_ARGS:-} ;;
    deploy) bash bench/gpu_deploy_energy.sh "${2:-$PWD/runs/gpu-deploy}" ;;
    determinism) "$PY" bench/gpu_determinism.py --device "$DEVICE" ${DETERMINISM_ARGS:-} ;;
    accuracy) "$PY" bench/gpu_vs_cpu.py --gpu "$DEVICE" --out "${2:-$PWD/runs/gpu-vs-cpu}" ${ACCURACY_ARGS:-} ;;
    *) echo "usage: bash bench/gpu_checks.sh round|batched|deploy|accuracy|determinism|all [OUT_DIR]" >&2; return 2 ;;
  esac
}
if [ "${1:-all}" != all ]; then
  check "$@"
  exit
fi
failed=()
for c in ${CHECKS:-round batched accuracy determinism deploy}; do  # CHECKS: a subset, in this order
  check "$c" || failed+=("$c")
done
[ ${#failed[@]} -eq 0 ] || { echo "gpu_checks: failed: ${failed[*]}" >&2; exit 1; }
