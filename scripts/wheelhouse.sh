#!/usr/bin/env bash
# Fill a wheelhouse for offline image builds: every wheel the images' `pip install ".[medmnist]"`
# needs (torch/torchvision from the CPU index by default) and the build backend (setuptools),
# for this machine's Python (the images' Python must match it: 3.11, x86-64 Linux).
#
#   scripts/wheelhouse.sh DIR [PIP-ARGS...]
#   scripts/images.sh --wheelhouse DIR ...     # then builds with no network at all
#
# PIP-ARGS go to `pip wheel` and replace the default (--extra-index-url https://download.pytorch.org/whl/cpu),
# e.g. where only PyPI and a folder of CPU torch wheels are reachable:
#   scripts/wheelhouse.sh /tmp/wheels --find-links /opt/wheels "torch==2.13.0" "torchvision==0.28.0"
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/wheelhouse.sh DIR [PIP-ARGS...]" >&2; exit 2; }
DIR=$1; shift
[ $# -gt 0 ] || set -- --extra-index-url https://download.pytorch.org/whl/cpu
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"the images run Python 3.11; this is {sys.version.split()[0]} (set PYTHON=)"'
mkdir -p "$DIR"
t0=$(date +%s)
"$PY" -m pip wheel --quiet -w "$DIR" "$@" ".[medmnist]" "setuptools>=68" wheel
rm -f "$DIR"/fedapp-*.whl  # the app itself is installed from its source in the image
echo "$(date -u +%FT%TZ) wheelhouse $DIR: $(ls "$DIR"/*.whl | wc -l) wheels, $(du -sh "$DIR" | cut -f1), $(( $(date +%s) - t0 )) s"
