#!/usr/bin/env bash
# System packages pip cannot install: nginx, the TLS proxy of every real deployment (docs/deploy.md),
# which the deployment tests start. Installed from the distribution (apt-get) where this is a
# Debian/Ubuntu machine and we are root; otherwise a line says what to install. Idempotent.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends nginx >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nginx >/dev/null; } \
    || echo "setup: apt-get could not install nginx; the deployment tests will fail until nginx is installed" >&2
  # the package may start its own web server on port 80; fedapp runs nginx with its own configuration
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
else
  echo "setup: nginx is not installed and cannot be installed here; the deployment tests will fail until it is" \
    "(Debian/Ubuntu: sudo apt-get install nginx)" >&2
fi
