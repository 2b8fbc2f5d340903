#!/usr/bin/env bash
# FedPart vs FNU on digits (spec fedpart.md §7.1 check 2): 3 seeds each, one process at a time,
# niced. Usage: bench/fedpart_digits.sh [noise] [out-root]   (defaults: 0.4, runs/fedpart-digits)
set -euo pipefail
cd "$(dirname "$0")/.."
noise="${1:-0.4}"
root="${2:-runs/fedpart-digits}"
py="${PYTHON:-/work/main/.venv/bin/python}"
for seed in 0 1 2; do
  for variant in fnu fedpart; do
    PYTHONPATH=. nice -n 10 "$py" -m fedapp run "configs/${variant}-digits-cnn.toml" \
      "seed=${seed} input-noise=${noise} run-dir='${root}/${variant}-seed${seed}'"
  done
done
PYTHONPATH=. "$py" -m fedapp report "$root"/fnu-seed{0,1,2} "$root"/fedpart-seed{0,1,2} --out "$root/report" --bytes up
