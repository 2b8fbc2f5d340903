#!/bin/bash
# Energy accounting under Flower deployment on loopback: 1 SuperLink + 2 SuperNodes (the default
# subprocess isolation runs every ClientApp message in a new process), each client reading the
# Jetson sysfs back end on a generated INA3221 board that draws a constant 10 W. Checks that each
# node's meter stays one meter across processes: client_round_j = 10 W x client_span_s, and the
# span covers the time between the node's replies, not only its own message.
#   bash bench/energy_deploy_loopback.sh [OUT_DIR]      (minutes; prints the per-round rows)
set -u
W=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$W/../main/.venv/bin/python}
BIN=$(dirname "$PY")
D=${1:-/tmp/fedapp-energy-deploy}
rm -rf "$D" && mkdir -p "$D"
export FLWR_HOME=$D/flwr-home FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export PYTHONUNBUFFERED=1 PATH=$BIN:$PATH PYTHONPATH=$W
"$PY" -c "from pathlib import Path; from tests.energy_fixtures import orin_hwmon; orin_hwmon(Path('$D/sys'), vdd_in=(5000, 2000))"
P=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
mkdir -p "$FLWR_HOME"
printf '[superlink]\ndefault = "deploy"\n[superlink.deploy]\naddress = "127.0.0.1:%s"\ninsecure = true\n' "$P" > "$FLWR_HOME/config.toml"
"$BIN/flower-superlink" --insecure --host 127.0.0.1 --port "$P" --database "$D/state.db" --disable-runtime-dependency-installation > "$D/superlink.log" 2>&1 &
PIDS=($!)
trap 'kill "${PIDS[@]}" 2>/dev/null; wait' EXIT
sleep 8
for i in 0 1; do
  "$BIN/flower-supernode" --insecure --superlink "127.0.0.1:$P" --port $((P + 1 + i)) \
    --node-config "partition-id=$i num-partitions=2 energy-sysfs-root='$D/sys'" > "$D/supernode$i.log" 2>&1 &
  PIDS+=($!)
done
sleep 8
cd "$W" && timeout 900 "$BIN/flwr" run . deploy --stream --run-config "num-server-rounds=3 num-clients=2 \
partition='0,2,4,6,8|1,3,5,7,9' run-dir='$D/run' energy-meter='jetson'" > "$D/flwr-run.log" 2>&1
echo "flwr run exit $? (log: $D/flwr-run.log)"
"$PY" - "$D/run/metrics.jsonl" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"round {r['round']}: wall {r['seconds']:.1f} s, meters {r['meters']}, round_j {r['round_j']:.1f} J over {r['meter_s']:.1f} meter-s")
    for p in sorted(r["client_train_s"]):
        print(f"  client {p}: train {r['client_train_s'][p]:.2f} s / {r['client_train_j'][p]:.1f} J, wait {r['client_wait_s'][p]:.1f} s, "
              f"round {r['client_round_j'][p]:.1f} J over {r['client_span_s'][p]:.1f} s ({r['client_round_j'][p] / r['client_span_s'][p]:.3f} W)")
PYEOF
