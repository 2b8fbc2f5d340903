#!/usr/bin/env bash
# The fleet time-to-accuracy runs of docs/results-fleet.md: every method, one after another, on one
# 8-node fleet (configs/fleet/jetson-mix.toml). Run as root from the checkout:
#   bash bench/fleet/methods.sh [OUT]        (default OUT: runs/fleet)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/flwr-env.sh
export PYTHONPATH=$PWD
OUT=${1:-runs/fleet}
# discovery waits for every node's first ClientApp (a torch import under its CPU quota): minutes on a loaded machine
C="optimizer='adam' lr=0.003 num-server-rounds=${ROUNDS:-5} target-accuracy=0.75 discovery-timeout=1800.0"
exec python -m fedapp fleet run configs/fleet/jetson-mix.toml bench/fleet/common.toml "$C method='fedavg' run-dir='$OUT/fedavg'" \
  --probe-kb 256 \
  --also "$C method='fedspu' early-stopping=true run-dir='$OUT/fedspu-es'" \
  --also "$C method='fedspu' run-dir='$OUT/fedspu'" \
  --also "$C method='fjord' run-dir='$OUT/fjord'" \
  --also "$C method='fedprox' proximal-mu=0.1 run-dir='$OUT/fedprox'" \
  --also "$C method='fedpart' num-server-rounds=5 warmup-rounds=1 rounds-per-layer=1 cycles=1 full-rounds-between-cycles=0 run-dir='$OUT/fedpart'" \
  --also "$C method='fedselect' run-dir='$OUT/fedselect'" \
  --also "$C method='fedpews' run-dir='$OUT/fedpews'"
