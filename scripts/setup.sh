#!/usr/bin/env bash
# Installs what `make test`, `make demo` and `make bench` need on a fresh Debian machine:
# Debian packages (fuse3, fio, awscli deps, samtools, docker.io for the container tests, …)
# and the test servers (MinIO, fake-gcs-server, Azurite, toxiproxy) into the project-local
# tools dir ($TOOLS, default .tools).
# Idempotent: what is already installed is skipped. Versions are pinned.
# usage: scripts/setup.sh [apt] [minio] [fakegcs] [azurite] [toxiproxy]   (no args = all)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/.tools}
BIN=$TOOLS/bin
mkdir -p "$BIN"

MINIO_VER=${MINIO_VER:-v0.0.0-20260212201848-7aac2a2c5b7c}
FAKEGCS_VER=${FAKEGCS_VER:-v1.56.1}
TOXIPROXY_VER=${TOXIPROXY_VER:-v2.12.0}
AZURITE_VER=${AZURITE_VER:-3.35.0}

items=("$@")
[ ${#items[@]} -eq 0 ] && items=(apt minio fakegcs azurite toxiproxy)

# retry runs a registry install up to 3 times: one refused or reset download from the
# Go proxy or the npm registry must not fail CI (a stop's CI died on one at azurite).
retry() {
  local n
  for n in 1 2 3; do
    "$@" && return 0
    echo "setup: attempt $n of 3 failed: $*" >&2
    [ "$n" -lt 3 ] && sleep $((n * 5))
  done
  return 1
}
goinst() { retry env GOBIN="$BIN" GOFLAGS=-buildvcs=false go install "$@"; }
have() { [ -x "$BIN/$1" ]; }

for it in "${items[@]}"; do
  t0=$SECONDS
  case $it in
    apt)
      need=()
      for p in fuse3 fio samtools curl python3 bubblewrap docker.io; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
      done
      command -v aws >/dev/null 2>&1 || need+=(awscli)
      if [ ${#need[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        retry apt-get update -q >/dev/null
        retry apt-get install -y -q -o=Dpkg::Use-Pty=0 "${need[@]}" >/dev/null
      fi
      [ -e /usr/bin/fusermount ] || ln -s fusermount3 /usr/bin/fusermount 2>/dev/null || true
      ;;
    minio)     have minio || goinst "github.com/minio/minio@$MINIO_VER" ;;
    fakegcs)   have fake-gcs-server || goinst "github.com/fsouza/fake-gcs-server@$FAKEGCS_VER" ;;
    toxiproxy)
      if ! have toxiproxy-server; then
        tmp=$(mktemp -d)
        retry env GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VER"
        mv "$tmp/server" "$BIN/toxiproxy-server"; rmdir "$tmp"
      fi ;;
    azurite)
      if ! have azurite-blob; then
        mkdir -p "$TOOLS/azurite"
        [ -f "$TOOLS/azurite/package.json" ] || echo '{"private":true}' >"$TOOLS/azurite/package.json"
        retry npm install --prefix "$TOOLS/azurite" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VER"
        ln -sf "$TOOLS/azurite/node_modules/.bin/azurite-blob" "$BIN/azurite-blob"
      fi ;;
    *) echo "setup: unknown item $it" >&2; exit 2 ;;
  esac
  echo "setup: $it ok ($((SECONDS - t0)) s)"
done
