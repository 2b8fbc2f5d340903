# Source before `flwr run` (the scripts do): this checkout's own Flower state and local SuperLink.
# `flwr run` sends a run to whatever local SuperLink holds its port, so FLWR_HOME and both ports
# the managed SuperLink listens on (HTTP API, Control API) are derived from this checkout's real
# path: two checkouts or users on one machine never share a SuperLink. fedapp/sim/flower_home.py (used by
# `fedapp sim`) computes the same values. FEDAPP_CHECKOUT tells the ServerApp where relative
# run-dirs go. The SuperLink keeps the environment it was started with.
_fedapp_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd -P)"
if command -v sha256sum >/dev/null 2>&1; then _fedapp_hash=$(printf %s "$_fedapp_root" | sha256sum); else _fedapp_hash=$(printf %s "$_fedapp_root" | shasum -a 256); fi
_fedapp_http=$(( 20000 + 2 * (0x${_fedapp_hash:0:8} % 6000) ))
export FEDAPP_CHECKOUT="$_fedapp_root"
export FLWR_HOME="$_fedapp_root/runs/.flwr"
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=$_fedapp_http
export FLWR_LOCAL_CONTROL_API_PORT=$(( _fedapp_http + 1 ))
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1   # else the SuperLink re-installs deps per run
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 RAY_DISABLE_USAGE_STATS=1
export RAY_ADDRESS="${RAY_ADDRESS:-local}"   # a new Ray per simulation, never a `ray start` left on the machine
export PATH="$_fedapp_root/.venv/bin:$PATH"
unset _fedapp_root _fedapp_hash _fedapp_http
