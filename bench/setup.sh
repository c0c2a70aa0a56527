#!/usr/bin/env bash
# Benchmark-only prerequisites, on top of `make setup` (MinIO, toxiproxy, fio, aws CLI):
#   s3fs and rclone from Debian (installed when missing),
#   matplotlib for the PNG chart (pip --target $TOOLS/py; optional: without it
#   the report falls back to a hand-written SVG chart).
# Idempotent. usage: bench/setup.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/.tools}

need=()
for p in s3fs rclone fio; do command -v "$p" >/dev/null 2>&1 || need+=("$p"); done
command -v aws >/dev/null 2>&1 || need+=(awscli)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench/setup: apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q -o=Dpkg::Use-Pty=0 "${need[@]}" >/dev/null
fi
[ -e /usr/bin/fusermount ] || ln -s fusermount3 /usr/bin/fusermount 2>/dev/null || true

if ! PYTHONPATH=$TOOLS/py python3 -c 'import matplotlib' 2>/dev/null; then
  echo "bench/setup: pip install matplotlib into $TOOLS/py"
  python3 -m pip install -q --disable-pip-version-check --target "$TOOLS/py" matplotlib ||
    echo "bench/setup: matplotlib unavailable; the chart will be SVG"
fi
for t in minio toxiproxy-server; do
  command -v "$t" >/dev/null 2>&1 || { echo "bench/setup: $t missing: run make setup" >&2; exit 1; }
done
