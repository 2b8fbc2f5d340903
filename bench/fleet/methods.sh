#!/usr/bin/env bash
# The fleet time-to-accuracy runs of docs/results-fleet.md: every method, one after another, on one
# 8-node fleet (configs/fleet/jetson-mix.toml). Run as root from the checkout:
#   bash bench/fleet/methods.sh [OUT]        (default OUT: runs/fleet)
#   ONLY="fjord fedprox" bash bench/fleet/methods.sh OUT     # a subset, in this file's order
#   ROUNDS=5 (default)                                       # rounds per run (FedPart: its own schedule)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/flwr-env.sh
export PYTHONPATH=$PWD
OUT=${1:-runs/fleet}
# discovery waits for every node's first ClientApp (a torch import under its CPU quota): minutes on a loaded machine
C="optimizer='adam' lr=0.003 num-server-rounds=${ROUNDS:-5} target-accuracy=0.75 discovery-timeout=1800.0"
declare -A RUN=(
  [fedavg]="method='fedavg'"
  [fedspu-es]="method='fedspu' early-stopping=true"
  [fedspu]="method='fedspu'"
  [fjord]="method='fjord'"
  [fedprox]="method='fedprox' proximal-mu=0.1"
  [fedpart]="method='fedpart' num-server-rounds=5 warmup-rounds=1 rounds-per-layer=1 cycles=1 full-rounds-between-cycles=0"
  [fedselect]="method='fedselect'"
  [fedpews]="method='fedpews'"
  # against stragglers: a round waits at most ROUND_TIMEOUT s (default 45) for replies; with fewer than 5 in time the model stays as it was
  [fedavg-timeout]="method='fedavg' round-timeout=${ROUND_TIMEOUT:-45.0} min-replies=5"
)
ORDER="fedavg fedspu-es fedspu fjord fedprox fedpart fedselect fedpews fedavg-timeout"
runs=()
for name in $ORDER; do
  if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]]; then runs+=("$C ${RUN[$name]} run-dir='$OUT/$name'"); fi
done
[ ${#runs[@]} -gt 0 ] || { echo "methods.sh: ONLY=$ONLY names no run of: $ORDER" >&2; exit 2; }
also=()
for r in "${runs[@]:1}"; do also+=(--also "$r"); done
exec python -m fedapp fleet run configs/fleet/jetson-mix.toml bench/fleet/common.toml "${runs[0]}" --probe-kb 256 "${also[@]}"
