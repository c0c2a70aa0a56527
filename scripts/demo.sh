#!/usr/bin/env bash
# make demo: start a local MinIO, create bucket "demo", write a few objects
# through ferry, then list and checksum them through /fusion/s3/demo in a
# second run, and stop MinIO.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PATH="${TOOLS:-$ROOT/.tools}/bin:$PATH"
unset AWS_CA_BUNDLE
FERRY=$ROOT/bin/ferry
WORK=$(mktemp -d /tmp/ferry-demo.XXXXXX)
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
P=$(port)
export AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1
export AWS_S3_ENDPOINT=http://127.0.0.1:$P
MINIO_ROOT_USER=minioadmin MINIO_ROOT_PASSWORD=minioadmin minio server "$WORK/data" \
  --address "127.0.0.1:$P" --console-address "127.0.0.1:$(port)" --quiet >"$WORK/minio.log" 2>&1 &
MPID=$!
trap 'kill $MPID 2>/dev/null; wait $MPID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -fs "$AWS_S3_ENDPOINT/minio/health/ready" >/dev/null && break; sleep 0.2; done
curl -fs --aws-sigv4 "aws:amz:us-east-1:s3" --user minioadmin:minioadmin -X PUT "$AWS_S3_ENDPOINT/demo" >/dev/null
echo "== MinIO at $AWS_S3_ENDPOINT, bucket demo"
MP="$WORK/mnt"
head -c 5000000 /dev/urandom >"$WORK/random.bin"
echo "== run 1: write through /fusion/s3/demo"
"$FERRY" run --mount-point "$MP" --cache-dir "$WORK/cache" -- sh -c "
  mkdir -p $MP/s3/demo/reads &&
  for i in 1 2 3; do seq 1 \$((i*1000)) > $MP/s3/demo/reads/sample\$i.txt; done &&
  cp $WORK/random.bin $MP/s3/demo/random.bin &&
  ln -s reads/sample1.txt $MP/s3/demo/latest"
echo "== run 2: list and checksum through /fusion/s3/demo (new cache)"
"$FERRY" run --mount-point "$MP" --cache-dir "$WORK/cache2" -- sh -c "
  ls -lR $MP/s3/demo && echo && cd / && find $MP/s3/demo -type f | sort | xargs sha256sum && readlink $MP/s3/demo/latest"
echo "== local checksum of random.bin"
sha256sum "$WORK/random.bin"
