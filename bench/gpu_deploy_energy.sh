#!/bin/bash
# On a machine with an NVIDIA GPU: a real Flower deployment on loopback (one SuperLink, four
# SuperNodes whose ClientApps all train on the one GPU: device=auto) runs the FedSPU
# early-stopping energy pair (configs/energy/fedspu-noes.toml and fedspu-es.toml, shortened to 4
# clients and ROUNDS rounds) and FedSelect on digits (FEDSELECT_ROUNDS rounds) to its last round,
# each client metering the GPU
# it trains on with NVML (energy-meter=nvml: fails loudly where NVML is missing). Prints the
# per-round GPU joules from metrics.jsonl, which device each client trained on, and the
# energy-savings table of `fedapp report --baseline fedspu-noes`.
# A SuperNode runs every ClientApp message in a new process (torch import and CUDA start each
# time), so a round costs seconds even on a GPU: RUNS picks a subset when one command must stay short.
#   bash bench/gpu_deploy_energy.sh [OUT_DIR]
#   env: ROUNDS=12 FEDSELECT_ROUNDS=8 METER=nvml RUNS="fedspu-noes fedspu-es fedselect" (bench/gpu_checks.sh deploy
#   installs what is missing first; the report step runs when both FedSPU runs are in OUT_DIR)
set -u
W=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
D=${1:-$W/runs/gpu-deploy}
ROUNDS=${ROUNDS:-12}
RUNS=${RUNS:-fedspu-noes fedspu-es fedselect}
mkdir -p "$D" && rm -rf "$D/flwr-home" "$D"/state*
export FLWR_HOME=$D/flwr-home FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$W${PYTHONPATH:+:$PYTHONPATH}
P=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
mkdir -p "$FLWR_HOME"
printf '[superlink]\ndefault = "deploy"\n[superlink.deploy]\naddress = "127.0.0.1:%s"\ninsecure = true\n' "$P" > "$FLWR_HOME/config.toml"
flower-superlink --insecure --host 127.0.0.1 --port "$P" --database "$D/state.db" --disable-runtime-dependency-installation > "$D/superlink.log" 2>&1 &
PIDS=($!)
trap 'kill "${PIDS[@]}" 2>/dev/null; wait' EXIT
"$PY" - "$P" <<'PYEOF' || { echo "the SuperLink did not open port $P (see $D/superlink.log)"; exit 1; }
import socket, sys, time
for _ in range(300):  # up to 60 s
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PYEOF
for i in 0 1 2 3; do
  flower-supernode --insecure --superlink "127.0.0.1:$P" --port $((P + 1 + i)) \
    --node-config "partition-id=$i num-partitions=4 state-dir='$D/state$i'" > "$D/supernode$i.log" 2>&1 &
  PIDS+=($!)
done  # no wait for the SuperNodes: the ServerApp's discovery waits for every partition's node

run() {  # NAME CONFIG.toml KEY=VALUE...: one run to its end on the deployment; the merged run-config is a TOML file
  local name=$1 base=$2; shift 2
  "$PY" - "$W/$base" "$D/$name.toml" "run-dir=$D/$name" "$@" <<'PYEOF'
import json, sys
from fedapp.core.config import load_toml_config, parse_overrides
cfg = load_toml_config(sys.argv[1])
for item in sys.argv[3:]:
    cfg.update(parse_overrides(item))
with open(sys.argv[2], "w") as fh:
    for k, v in cfg.items():
        fh.write(f"{k} = {json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else v}\n")
PYEOF
  (cd "$W" && timeout 3600 flwr run . deploy --stream --run-config "$D/$name.toml" > "$D/$name.log" 2>&1)
  if [ ! -s "$D/$name/metrics.jsonl" ]; then echo "$name: no metrics (see $D/$name.log)"; return 1; fi
  "$PY" - "$D/$name" <<'PYEOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
print(f"{d.name}: {len(rows)} rounds; devices {json.loads((d / 'devices.json').read_text())}")
for r in rows:
    acc = r.get("personalized_accuracy", r["accuracy"])
    print(f"  round {r['round']:>3}: accuracy {acc:.4f}, {r['seconds']:.2f} s, GPU {r.get('round_j', float('nan')):.1f} J, failures {r['failures']}")
PYEOF
}
COMMON=("num-clients=4" "energy-meter='${METER:-nvml}'" "device='auto'")
for r in $RUNS; do
  rm -rf "${D:?}/$r"
  case $r in
    fedspu-noes|fedspu-es) run "$r" "configs/energy/$r.toml" "${COMMON[@]}" "num-server-rounds=$ROUNDS" "fraction-train=0.5" ;;
    fedselect) run fedselect configs/fedselect-digits.toml "${COMMON[@]}" "classes-per-client=5" "samples-per-client=20" \
      "num-server-rounds=${FEDSELECT_ROUNDS:-8}" ;;
  esac
done
if [ -s "$D/fedspu-noes/metrics.jsonl" ] && [ -s "$D/fedspu-es/metrics.jsonl" ]; then
  (cd "$W" && "$PY" -m fedapp report "$D/fedspu-noes" "$D/fedspu-es" --metric personalized_accuracy --baseline fedspu-noes --out "$D/report")
fi
