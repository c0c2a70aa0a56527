#!/usr/bin/env bash
# `make layer`: ferry as a Wave container layer for Nextflow's
# fusion.containerConfigUrl, so stock Nextflow + Wave put our binary (not
# Seqera's) at /usr/bin/fusion in every task image.
# Writes $OUT/fusion-layer.tar.gz: usr/bin/ferry + usr/bin/fusion -> ferry,
#        reproducible (sorted, mtime 0, root-owned, gzip -n);
#        $OUT/fusion-layer.json: {entrypoint, env, layers: [{location,
#        gzipDigest, gzipSize, tarDigest, skipHashing}]}, the shape of
#        Seqera's releases/v2.x-<arch>.json.
# env: FERRY_BIN (default bin/ferry), OUT (default bin), LAYER_URL (where
#      Wave downloads the tarball: upload it there, e.g. an https release
#      asset or a public bucket; default file://$OUT/fusion-layer.tar.gz,
#      which only documents the local file: Wave cannot fetch it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FERRY_BIN=${FERRY_BIN:-$ROOT/bin/ferry}
OUT=${OUT:-$ROOT/bin}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LAYER_URL=${LAYER_URL:-file://$OUT/fusion-layer.tar.gz}
case $LAYER_URL in *[\"\\]* | *[[:space:]]*) echo "layer: LAYER_URL must not hold quotes, backslashes or spaces" >&2; exit 2 ;; esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$ROOT/scripts/rootfs.sh" layer "$FERRY_BIN" "$work/root"
tar -C "$work/root" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  --format=ustar -cf "$work/layer.tar" usr
gzip -n -c "$work/layer.tar" >"$work/layer.tar.gz"
tar_digest=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gz_digest=$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)
gz_size=$(stat -c %s "$work/layer.tar.gz")

cat >"$work/layer.json" <<EOF
{
  "entrypoint": ["/usr/bin/fusion"],
  "env": ["FUSION_CONFIG_PROFILE=nextflow", "FUSION_COMPACT_SYMLINKS=true", "FUSION_SHOW_GLOBAL_INFO=true"],
  "layers": [
    {
      "location": "$LAYER_URL",
      "gzipDigest": "sha256:$gz_digest",
      "gzipSize": $gz_size,
      "tarDigest": "sha256:$tar_digest",
      "skipHashing": true
    }
  ]
}
EOF
mv "$work/layer.tar.gz" "$OUT/fusion-layer.tar.gz"
mv "$work/layer.json" "$OUT/fusion-layer.json"
echo "layer: $OUT/fusion-layer.tar.gz ($gz_size bytes, sha256:$gz_digest)"
echo "layer: $OUT/fusion-layer.json (location $LAYER_URL)"
