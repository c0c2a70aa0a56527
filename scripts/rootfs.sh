#!/usr/bin/env bash
# Lays out ferry's files as they go into an image or a Wave layer, so the
# Dockerfile, `make image` and `make layer` all ship the same tree.
# usage: scripts/rootfs.sh image|layer FERRY_BIN DIR
#   layer: DIR/usr/bin/ferry (0755) and DIR/usr/bin/fusion -> ferry (the
#          Nextflow path); nothing else, so it can go on top of any task image.
#   image: the layer plus what a FROM scratch image needs: /tmp (1777, the
#          default cache location), /fusion (the mount point) and the CA
#          bundle ($CA_BUNDLE, default /etc/ssl/certs/ca-certificates.crt;
#          skipped with a warning when missing, then only http endpoints work).
set -euo pipefail
[ $# -eq 3 ] || { sed -n '4,10p' "$0" >&2; exit 2; }
kind=$1 bin=$2 dir=$3
case $kind in image | layer) ;; *) echo "rootfs: unknown kind $kind" >&2; exit 2 ;; esac
[ -f "$bin" ] || { echo "rootfs: $bin not found (run make build)" >&2; exit 1; }
if command -v ldd >/dev/null && ldd "$bin" >/dev/null 2>&1; then
  echo "rootfs: $bin is dynamically linked; build it with CGO_ENABLED=0 (make build)" >&2
  exit 1
fi
install -d -m 0755 "$dir/usr" "$dir/usr/bin"
install -m 0755 "$bin" "$dir/usr/bin/ferry"
ln -sfn ferry "$dir/usr/bin/fusion"
[ "$kind" = layer ] && exit 0
install -d -m 1777 "$dir/tmp"
install -d -m 0755 "$dir/fusion"
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$ca" ]; then
  install -D -m 0644 "$ca" "$dir/etc/ssl/certs/ca-certificates.crt"
else
  echo "rootfs: warning: no CA bundle at $ca; https endpoints will fail in the image" >&2
fi
