#!/usr/bin/env bash
# Main job: set up, then FedAvg vs FedProx on scikit-learn digits (4 clients, Dirichlet 0.3)
# through `flwr run` (Flower's Ray simulation engine); ends with a results table and a plot.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/flwr-env.sh
started_superlink=""
cleanup() {
  # stop only the managed SuperLink this script started (found by our FLWR_HOME)
  if [ -z "$started_superlink" ]; then return; fi
  for pid in $(pgrep -f "flower-superlink.*$FLWR_HOME" || true); do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
pgrep -f "flower-superlink.*$FLWR_HOME" >/dev/null || started_superlink=yes
for method in fedavg fedprox; do
  flwr run . --stream --run-config "configs/demo-digits-$method.toml" \
    --federation-config "num-supernodes=4 client-resources-num-cpus=1"
done
fedapp report runs/demo-fedavg runs/demo-fedprox --out runs/demo-report --target 0.9
