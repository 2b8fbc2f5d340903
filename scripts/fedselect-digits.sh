#!/usr/bin/env bash
# FedSelect digits grid (spec fedselect §7.1, setting E): 3 seeds (each redraws the
# shard partition: seed = data-seed) x {FedSelect α = 0.05/0.3/0.5/0.8, Personalize-
# Least and Random at α = 0.3, FedAvg, FedAvg+FT, FedPer, Local}. One run at a time.
# Usage: scripts/fedselect-digits.sh [runs-root]   (default runs/fedselect-digits)
set -euo pipefail
ROOT=${1:-runs/fedselect-digits}
PY=${PYTHON:-python}
run() {  # name seed overrides...
  local name=$1 seed=$2; shift 2
  local dir="$ROOT/$name-seed$seed"
  [ -s "$dir/model.npz" ] && return 0   # finished; an interrupted run continues from its checkpoint (resume=true)
  nice -n 10 "$PY" -m fedapp run configs/fedselect-digits.toml "seed=$seed data-seed=$seed run-dir='$dir' resume=true $*" \
    > "$ROOT/$name-seed$seed.log" 2>&1 || { echo "failed: $dir (see $ROOT/$name-seed$seed.log)" >&2; exit 1; }
}
mkdir -p "$ROOT"
for seed in 0 1 2; do
  run fedselect "$seed" "method='fedselect'"
  run fedavg "$seed" "method='fedavg'"
  run fedavg-ft "$seed" "method='fedavg-ft'"
  run fedper "$seed" "method='fedper'"
  run local "$seed" "method='local'"
  for a in 0.05 0.5 0.8; do run "fedselect-a$a" "$seed" "method='fedselect' personal-limit=$a"; done
  run fedselect-least "$seed" "method='fedselect' personal-selection='least'"
  run fedselect-random "$seed" "method='fedselect' personal-selection='random'"
done
echo "done: $ROOT"
