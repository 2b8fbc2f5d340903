#!/usr/bin/env bash
# Main job: set up, then FedAvg vs FedProx on scikit-learn digits (4 clients, Dirichlet 0.3)
# through `fedapp sim` (`flwr run` on this checkout's own local SuperLink, Flower's Ray
# simulation engine); ends with a results table and a plot in runs/demo-<UTC time>/.
# Any failed run stops the script with a non-zero exit and the one-line reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/flwr-env.sh
out="$PWD/runs/demo-$(date -u +%Y%m%d-%H%M%S)"
started_superlink=""
cleanup() {
  # stop only the managed SuperLink this script started (found by this checkout's FLWR_HOME)
  if [ -z "$started_superlink" ]; then return; fi
  for pid in $(pgrep -f "flower-superlink.*$FLWR_HOME/" || true); do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
pgrep -f "flower-superlink.*$FLWR_HOME/" >/dev/null || started_superlink=yes
for method in fedavg fedprox; do
  fedapp sim "configs/demo-digits-$method.toml" "run-dir='$out/$method'" \
    --federation-config "num-supernodes=4 client-resources-num-cpus=1"
done
fedapp report "$out/fedavg" "$out/fedprox" --out "$out/report" --target 0.9
