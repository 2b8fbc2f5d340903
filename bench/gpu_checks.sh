#!/bin/bash
# The checks that need an NVIDIA GPU, one command each, on a GPU machine whose image has Python,
# CUDA torch and torchvision but not Flower. Flower and the rest of what fedapp needs travel as
# wheels in a git-ignored .whl/ folder copied along with the repository; they are installed into
# .site/ here on first use (Ray is not among them: its wheel is too large, so these checks use the
# in-process engine and a real SuperLink + SuperNodes, not `flwr run` with Ray).
#   bash bench/gpu_checks.sh round       # bench/gpu_round.py: engine vs plain loop, 50 x 512, cnn + resnet8
#   bash bench/gpu_checks.sh deploy      # bench/gpu_deploy_energy.sh: loopback deployment, NVML joules, ES savings
#   bash bench/gpu_checks.sh accuracy    # bench/gpu_vs_cpu.py: same-seed GPU vs CPU accuracy, 5 methods
#   bash bench/gpu_checks.sh all
set -eu
cd "$(dirname "$0")/.."
if ! python3 -c "import flwr" 2>/dev/null; then
  [ -d .whl ] || { echo "flwr is missing and there is no .whl/ folder of wheels to install it from" >&2; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
fi
export PYTHONPATH=$PWD/.site:$PWD PATH=$PWD/.site/bin:$PATH PYTHONUNBUFFERED=1
python3 -c "import torch, flwr; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'flwr', flwr.__version__)"
case "${1:-all}" in
  round) python3 bench/gpu_round.py --device cuda ;;
  deploy) bash bench/gpu_deploy_energy.sh "${2:-$PWD/runs/gpu-deploy}" ;;
  accuracy) python3 bench/gpu_vs_cpu.py --out "${2:-$PWD/runs/gpu-vs-cpu}" ;;
  all) python3 bench/gpu_round.py --device cuda || true; python3 bench/gpu_vs_cpu.py || true; bash bench/gpu_deploy_energy.sh ;;
  *) echo "usage: bash bench/gpu_checks.sh round|deploy|accuracy|all" >&2; exit 2 ;;
esac
