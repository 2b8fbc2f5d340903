#!/usr/bin/env bash
# Run a long experiment from a frozen copy of the code, so editing the worktree meanwhile
# cannot change (or break) runs that start later. Usage: bench/snapshot_run.sh SNAPDIR CMD...
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
snap="$1"; shift
rm -rf "$snap"; mkdir -p "$snap"
(cd "$here" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -xf - -C "$snap"
ln -s "$here/runs" "$snap/runs"
cd "$snap" && "$@"
