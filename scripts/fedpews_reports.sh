#!/bin/bash
# Tables and plots for docs/results-fedpews.md from the FedPeWS grid (scripts/fedpews_grid.py).
# Usage: scripts/fedpews_reports.sh [runs/fedpews-grid] [docs/results-fedpews]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-runs/fedpews-grid}
OUT=${2:-docs/results-fedpews}
PY=${PYTHON:-.venv/bin/python}
report() {  # report NAME [fedapp report options] -- RUN_GLOBS...
  local name=$1; shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  local runs=()
  for g in "$@"; do for d in $RUNS/$g; do [ -f "$d/metrics.jsonl" ] && runs+=("$d"); done; done
  if [ ${#runs[@]} -eq 0 ]; then echo "skip $name: no runs"; return; fi
  PYTHONPATH=. $PY -m fedapp report "${runs[@]}" --out "$OUT/$name" --per-seed "${opts[@]}" > /dev/null
  echo "$OUT/$name/report.md (${#runs[@]} runs)"
}
report synthetic32k-n2 --warmup -- 'n2/*-seed*'
report synthetic32k-n2-col2 --warmup -- 'n2-col2/*-seed*'
report synthetic32k-n2-col3 --warmup -- 'n2-col3/*-seed*'
report synthetic3.2k-n2 --warmup -- 'e5/*-seed*'
report fedprox-n2 --warmup -- 'prox-n2/fedprox-seed*' 'prox-n2/fedprox-pews-seed*'
report fedprox-synthetic3.2k-n2 --warmup -- 'prox-e5/fedprox-seed*' 'prox-e5/fedprox-pews-seed*'
report synthetic32k-n4 --warmup -- 'n4/*-seed*' 'n4-central/*-seed*'
report synthetic32k-n4-pews-options --warmup -- 'n4/fedavg-seed*' 'n4/fedpews-seed*' 'n4-pews-options/*-seed*'
report synthetic32k-n4-both -- 'n4/fedavg-seed*' 'n4/fedpews-seed*' 'n4-both/*-seed*'
report digits-n2 --warmup -- 'digits/*-seed*'
# Every paper setting in one table (docs/results.md).
report paper-settings -- 'n2/*-seed*' 'n2-col2/*-seed*' 'n2-col3/*-seed*' 'e5/*-seed*' 'prox-n2/fedprox-seed*' 'prox-n2/fedprox-pews-seed*' 'prox-e5/fedprox-seed*' 'prox-e5/fedprox-pews-seed*' 'n4/*-seed*'
