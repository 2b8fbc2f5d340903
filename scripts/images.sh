#!/usr/bin/env bash
# Build the amd64 images of docker/Dockerfile (targets superlink, proxy, supernode) with buildah,
# or docker where buildah is absent, from a base image given as a build argument.
#
#   scripts/images.sh [--base IMAGE] [--make-base] [--torch-index URL] [--tag VERSION] [--log FILE]
#
#   --base IMAGE       Python 3.11 base image (PYTHON_IMAGE build argument; default python:3.11-slim-bookworm)
#   --make-base        make the base here instead: a Debian bookworm root filesystem from Debian's packages
#                      (mmdebstrap: python3, pip, venv, ca-certificates, nginx-light), imported as localhost/fedapp-base:bookworm
#                      with pip allowed to install into the system Python; for hosts without an image registry
#   --wheelhouse DIR   install the Python packages from the wheels in DIR only (scripts/wheelhouse.sh makes it), and
#                      build with no network at all (buildah: inside a network namespace of its own with only a
#                      loopback, made and removed here; docker: --network none): needs a base image with nginx
#                      (--make-base puts it in) for the SuperLink and proxy targets
#   --torch-index URL  TORCH_INDEX build argument (default: the Dockerfile's CPU wheel index; give
#                      https://pypi.org/simple where only PyPI is reachable: its Linux torch wheels bring CUDA libraries)
#   --host-ca FILE     CA bundle seen by the builds' RUN steps (buildah only: mounted read-only over the image's
#                      /etc/ssl/certs/ca-certificates.crt, never stored in an image), for hosts whose HTTPS goes
#                      through a TLS-inspecting proxy; pip in the base image reads that path (PIP_CERT)
#   --rev REV          build from this commit (git archive), not the work tree: edits made during a build
#                      cannot change what it copies (default HEAD)
#   --targets LIST     comma-separated subset of superlink,proxy,supernode (default all three)
#   --tag VERSION      image tag (default 0.1.0)
#   --log FILE         summary (seconds per target, image sizes) appended here (default images-build.log)
# Needs root for buildah's chroot isolation (the builds' RUN steps run in a chroot, no daemon).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=python:3.11-slim-bookworm MAKE_BASE=0 TORCH_INDEX="" TAG=0.1.0 LOG=images-build.log HOST_CA="" WHEELS="" REV=HEAD TARGETS=superlink,proxy,supernode
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=$2; shift 2 ;;
    --make-base) MAKE_BASE=1; shift ;;
    --wheelhouse) WHEELS=$2; shift 2 ;;
    --torch-index) TORCH_INDEX=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --host-ca) HOST_CA=$2; shift 2 ;;
    --rev) REV=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    --log) LOG=$2; shift 2 ;;
    *) echo "images.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if command -v buildah >/dev/null; then TOOL=buildah; elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then TOOL=docker
else echo "images.sh: needs buildah (apt-get install buildah) or a running docker" >&2; exit 2; fi

if [ "$MAKE_BASE" = 1 ]; then
  command -v mmdebstrap >/dev/null || { echo "images.sh: --make-base needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  t0=$(date +%s)
  mmdebstrap --variant=apt --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates,nginx-light \
    bookworm "$tmp/rootfs.tar" http://deb.debian.org/debian
  BASE=localhost/fedapp-base:bookworm
  if [ "$TOOL" = buildah ]; then
    ctr=$(buildah from scratch)
    buildah add "$ctr" "$tmp/rootfs.tar" / >/dev/null
    buildah config --env PIP_BREAK_SYSTEM_PACKAGES=1 --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt --cmd /bin/bash "$ctr"
    buildah commit --rm "$ctr" "$BASE" >/dev/null
  else
    docker import --change "ENV PIP_BREAK_SYSTEM_PACKAGES=1" --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
      "$tmp/rootfs.tar" "$BASE" >/dev/null
  fi
  echo "$(date -u +%FT%TZ) base $BASE (Debian bookworm via mmdebstrap): $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx" ${tmp:+"$tmp"}' EXIT
git archive "$REV" | tar -x -C "$ctx"
mkdir -p "$ctx/docker/wheels"
if [ -n "$WHEELS" ]; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "images.sh: --wheelhouse $WHEELS has no wheels (scripts/wheelhouse.sh $WHEELS)" >&2; exit 2; }
  cp "$WHEELS"/*.whl "$ctx/docker/wheels/"
fi
args=(--build-arg "PYTHON_IMAGE=$BASE")
[ -n "$TORCH_INDEX" ] && args+=(--build-arg "TORCH_INDEX=$TORCH_INDEX")
bargs=()
netns=()  # buildah's chroot isolation has no --network none: an offline build runs in an empty network namespace
if [ -n "$WHEELS" ] && [ "$TOOL" = buildah ]; then
  ns=fedapp-offline-$$
  ip netns add "$ns"
  trap 'rm -rf "$ctx" ${tmp:+"$tmp"}; ip netns del '"$ns"' 2>/dev/null || true' EXIT
  netns=(ip netns exec "$ns")
fi
[ -n "$HOST_CA" ] && bargs+=(--volume "$(readlink -f "$HOST_CA"):/etc/ssl/certs/ca-certificates.crt:ro")
for target in ${TARGETS//,/ }; do
  t0=$(date +%s)
  if [ "$TOOL" = buildah ]; then
    ${netns[@]+"${netns[@]}"} buildah build --isolation chroot --layers "${bargs[@]}" -f "$ctx/docker/Dockerfile" --target "$target" "${args[@]}" -t "fedapp-$target:$TAG" "$ctx"
  else
    docker build ${WHEELS:+--network none} -f "$ctx/docker/Dockerfile" --target "$target" "${args[@]}" -t "fedapp-$target:$TAG" "$ctx"
  fi
  echo "$(date -u +%FT%TZ) fedapp-$target:$TAG from $BASE${WHEELS:+ offline from $WHEELS} at $(git rev-parse --short "$REV") with $TOOL: $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
done
if [ "$TOOL" = buildah ]; then buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -E "fedapp-(base|superlink|proxy|supernode)" | tee -a "$LOG"
else docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "fedapp-(base|superlink|proxy|supernode)" | tee -a "$LOG"; fi
