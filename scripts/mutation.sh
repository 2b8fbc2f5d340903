#!/usr/bin/env bash
# Mutation testing of the trust-critical modules: mutmut changes one thing at a time in a module (an
# operator, a constant, a condition) and runs that module's own fast tests; a mutant no test notices
# ("survived", or "no tests" when no listed test reaches the code) is a gap in the tests. Prints the
# score per module: killed / (total - mutants listed in tests/mutation-equivalents.txt, with the reason
# each changes no behaviour). Not in the default suite (minutes per module).
#   scripts/mutation.sh                   every module below
#   scripts/mutation.sh fedapp/core/wire.py    one module (survivors are listed by name: mutmut show NAME
#                                         in .mutation/fedapp.core.wire shows the change)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# module -> its own fast test files (space-separated)
declare -A TESTS=(
  [fedapp/core/aggregate.py]="tests/test_aggregate.py"
  [fedapp/core/wire.py]="tests/test_wire.py"
  [fedapp/core/masks.py]="tests/test_masks.py"
  [fedapp/server/rundir.py]="tests/test_rundir.py"
  [fedapp/server/roster.py]="tests/test_roster.py"
  [fedapp/server/reply_checks.py]="tests/test_reply_checks_unit.py"
  [fedapp/core/config.py]="tests/test_config.py tests/test_config_values.py tests/test_config_ranges.py"
  [fedapp/server/robust.py]="tests/test_robust_aggregate.py tests/test_robust_edges.py"
)
ORDER=(fedapp/core/aggregate.py fedapp/core/wire.py fedapp/core/masks.py fedapp/server/rundir.py fedapp/server/roster.py fedapp/server/reply_checks.py fedapp/core/config.py fedapp/server/robust.py)
EQUIVALENTS=$root/tests/mutation-equivalents.txt

[ -x .venv/bin/python ] || scripts/setup.sh
# mutmut is a separate extra, installed on first use (3.8.0 fails under pytest 9: use 3.8.1)
.venv/bin/python -c "import mutmut" 2>/dev/null || .venv/bin/python -m pip install -q -c requirements-lock.txt -e ".[mutation]"
source scripts/flwr-env.sh
unset PYTHONPATH  # mutmut puts its mutated copy first on the path; a PYTHONPATH to the sources would shadow it

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=("${ORDER[@]}")
summary=()
for mod in "${modules[@]}"; do
  tests=${TESTS[$mod]:-}
  [ -n "$tests" ] || { echo "no test files listed for $mod (known: ${ORDER[*]})" >&2; exit 2; }
  dotted=${mod%.py}; dotted=${dotted//\//.}
  work=$root/.mutation/$dotted  # git-ignored scratch copy: mutmut writes mutants/ and reads its config from here
  rm -rf "$work" && mkdir -p "$work"
  cp -r fedapp tests configs client_app.py server_app.py "$work"/
  find "$work" -name __pycache__ -prune -exec rm -rf {} +
  test_list=$(printf '"%s", ' $tests)
  { cat pyproject.toml
    printf '\n[tool.mutmut]\nsource_paths = ["fedapp/"]\nonly_mutate = ["%s"]\n' "$mod"
    printf 'pytest_add_cli_args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]\n'
    printf 'pytest_add_cli_args_test_selection = [%s]\n' "${test_list%, }"
    printf 'also_copy = ["tests/", "configs/", "client_app.py", "server_app.py"]\n'
  } > "$work/pyproject.toml"
  echo "== $mod against $tests"
  (cd "$work" && nice "$root/.venv/bin/mutmut" run --max-children "${MUTATION_CHILDREN:-1}" > run.log 2>&1) || {
    tail -30 "$work/run.log" >&2; echo "mutmut run failed for $mod (log: $work/run.log)" >&2; exit 1; }
  (cd "$work" && "$root/.venv/bin/mutmut" results --all true) > "$work/results.txt"
  line=$(.venv/bin/python - "$work/results.txt" "$EQUIVALENTS" "$dotted" "$mod" <<'EOF'
import re, sys
results, equivalents, dotted, mod = sys.argv[1:]
status = dict(re.findall(r"^\s*(\S+): (.+?)\s*$", open(results).read(), re.M))
status = {k: v for k, v in status.items() if k.startswith(dotted + ".")}
listed = {ln.split()[0] for ln in open(equivalents) if ln.strip() and not ln.startswith("#")}
stale = sorted(n for n in listed if n.startswith(dotted + ".") and status.get(n) in (None, "killed", "timeout"))
for n in stale:
    print(f"  listed as equivalent but {status.get(n, 'not generated')}: {n}", file=sys.stderr)
counted = {k: v for k, v in status.items() if k not in listed}
killed = sum(v in ("killed", "timeout") for v in counted.values())
for k, v in sorted(counted.items()):
    if v not in ("killed", "timeout"):
        print(f"  {v}: {k}", file=sys.stderr)
n = len(counted)
print(f"{mod:24} {killed:4d} / {n:4d} killed  {100 * killed / max(n, 1):5.1f}%  ({len(status) - n} equivalent)")
EOF
  )
  echo "$line"
  summary+=("$line")
done
echo "== mutation score (killed / non-equivalent mutants)"
printf '%s\n' "${summary[@]}"
