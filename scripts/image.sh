#!/usr/bin/env bash
# `make image`: the ferry image from the prebuilt static binary, FROM scratch
# (deploy/docker/Dockerfile.prebuilt; nothing is pulled), tagged
# $IMAGE:<version> and $IMAGE:latest.
# Engine: $DOCKER_HOST if set; else the default one if it answers; else a
# private dockerd under .tools/run (scripts/dockerd.sh start; it keeps running,
# `scripts/dockerd.sh stop` stops it).
# env: FERRY_BIN (default bin/ferry), IMAGE (default ferry), VERSION (default
#      git describe), CA_BUNDLE (see scripts/rootfs.sh), DOCKER (CLI, default docker)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FERRY_BIN=${FERRY_BIN:-$ROOT/bin/ferry}
IMAGE=${IMAGE:-ferry}
VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
DOCKER=${DOCKER:-docker}
# A Docker tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
tag=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9_.-' '-' | cut -c1-128)

if [ -n "${DOCKER_HOST:-}" ]; then
  "$DOCKER" info >/dev/null 2>&1 || { echo "image: no Docker engine answers at DOCKER_HOST=$DOCKER_HOST" >&2; exit 1; }
elif ! "$DOCKER" info >/dev/null 2>&1; then
  "$ROOT/scripts/dockerd.sh" start >&2
  DOCKER_HOST=$("$ROOT/scripts/dockerd.sh" host)
  export DOCKER_HOST
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
"$ROOT/scripts/rootfs.sh" image "$FERRY_BIN" "$ctx/rootfs"
cp "$ROOT/deploy/docker/Dockerfile.prebuilt" "$ctx/Dockerfile"
# The classic builder: FROM scratch needs no BuildKit, and the engine may
# have no buildx (Debian docker.io).
id=$(DOCKER_BUILDKIT=0 "$DOCKER" build -q --label "org.opencontainers.image.version=$VERSION" \
  -t "$IMAGE:$tag" -t "$IMAGE:latest" "$ctx" 2>"$ctx/build.log") || { cat "$ctx/build.log" >&2; exit 1; }
echo "image: $IMAGE:$tag and $IMAGE:latest ($id) on ${DOCKER_HOST:-the default engine}"
