# Sourced by the scripts: keep Flower's state inside the project and offline-friendly.
export FLWR_HOME="${FLWR_HOME:-$PWD/runs/.flwr}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1   # else the SuperLink re-installs deps per run
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 RAY_DISABLE_USAGE_STATS=1
export PATH="$PWD/.venv/bin:$PATH"
