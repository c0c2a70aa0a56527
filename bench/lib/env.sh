# Benchmark environment: MinIO on a free loopback port behind toxiproxy
# (20 ms downstream latency + 102400 KB/s downstream bandwidth per connection,
# the setup of ../shared/reference/peer-bench.md), and the seed data.
#   BENCH_S3_DIRECT  unproxied endpoint (setup uploads and durability polls)
#   BENCH_S3         proxied endpoint every contender uses
BUCKET=ferrybench
LAT_MS=${BENCH_LAT_MS:-20}
RATE_KBPS=${BENCH_RATE_KBPS:-102400}

env_start() {
  local mp cp tp pp i
  mp=$(free_port); cp=$(free_port); tp=$(free_port); pp=$(free_port)
  export MINIO_ROOT_USER=minioadmin MINIO_ROOT_PASSWORD=minioadmin
  export AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin
  export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
  export BENCH_S3_DIRECT=http://127.0.0.1:$mp BENCH_S3=http://127.0.0.1:$pp
  bg minio minio server "$W/minio" --address "127.0.0.1:$mp" --console-address "127.0.0.1:$cp" --quiet
  MINIO_PID=$BG_PID
  for i in $(seq 150); do curl -fs "$BENCH_S3_DIRECT/minio/health/ready" >/dev/null && break; sleep 0.2; done
  curl -fs "$BENCH_S3_DIRECT/minio/health/ready" >/dev/null || { log "MinIO did not start"; return 1; }

  TOXI_API=http://127.0.0.1:$tp
  bg toxiproxy toxiproxy-server -host 127.0.0.1 -port "$tp"
  for i in $(seq 100); do curl -fs "$TOXI_API/version" >/dev/null && break; sleep 0.1; done
  curl -fs -X POST "$TOXI_API/proxies" -H 'Content-Type: application/json' \
    -d "{\"name\":\"s3\",\"listen\":\"127.0.0.1:$pp\",\"upstream\":\"127.0.0.1:$mp\",\"enabled\":true}" >/dev/null
  curl -fs -X POST "$TOXI_API/proxies/s3/toxics" -H 'Content-Type: application/json' \
    -d "{\"name\":\"lat_down\",\"type\":\"latency\",\"stream\":\"downstream\",\"toxicity\":1,\"attributes\":{\"latency\":$LAT_MS,\"jitter\":0}}" >/dev/null
  curl -fs -X POST "$TOXI_API/proxies/s3/toxics" -H 'Content-Type: application/json' \
    -d "{\"name\":\"bw_down\",\"type\":\"bandwidth\",\"stream\":\"downstream\",\"toxicity\":1,\"attributes\":{\"rate\":$RATE_KBPS}}" >/dev/null
  python3 "$LIB/s3.py" mkbucket "$BUCKET"
  log "MinIO $BENCH_S3_DIRECT, proxy $BENCH_S3 (+${LAT_MS} ms, ${RATE_KBPS} KB/s per connection), bucket $BUCKET"
}

# aws CLI against the unproxied port (setup only, not measured).
aws_direct() { aws --endpoint-url "$BENCH_S3_DIRECT" --only-show-errors "$@"; }
# aws CLI through the proxy (the copy baseline).
aws_proxy() { aws --endpoint-url "$BENCH_S3" --only-show-errors "$@"; }

# env_seed: local data in $W/data and the objects the workloads read (sizes from run.sh).
#   big/big.bin     BIG_MB MiB, random (the fio object)
#   smallseed/      SMALL_N x 4 KiB (list/stat/read-back when a client's create timed out)
#   tree/           TREE_N keys of 100 bytes, TREE_PER_DIR per directory (ls -lR)
#   ref/ref.bin     TASK_REF_MB MiB (the task workload's shared reference)
# Objects go straight to MinIO (unproxied): put-many uses 32 connections.
env_seed() {
  local d=$W/data t0=$SECONDS
  mkdir -p "$d/small"
  head -c "${BIG_MB}M" /dev/urandom >"$d/big.bin"
  head -c "${WRITE_MB}M" /dev/urandom >"$d/write.bin"
  python3 - "$d" "$SMALL_N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
blob = os.urandom(4096)
for i in range(n):
    open("%s/small/t%05d.txt" % (d, i), "wb").write(blob[i % 64:] + blob[:i % 64])
PY
  aws_direct s3 cp "$d/big.bin" "s3://$BUCKET/big/big.bin"
  python3 "$LIB/s3.py" put-many "$BUCKET" smallseed/ "$SMALL_N" 4096
  log "seeded big/big.bin (${BIG_MB} MiB), smallseed/ (${SMALL_N} x 4 KiB) in $((SECONDS - t0)) s"
  if [ "${TREE_N:-0}" -gt 0 ]; then
    t0=$SECONDS
    python3 "$LIB/s3.py" put-many "$BUCKET" tree/ "$TREE_N" 100 "$TREE_PER_DIR"
    log "seeded tree/ ($TREE_N keys, $TREE_PER_DIR per directory) in $((SECONDS - t0)) s"
  fi
  if [ "${TASKS:-0}" -gt 0 ]; then
    t0=$SECONDS
    head -c "${TASK_REF_MB}M" /dev/urandom >"$d/ref.bin"
    head -c "${TASK_OUT_MB}M" /dev/urandom >"$d/out.bin"
    aws_direct s3 cp "$d/ref.bin" "s3://$BUCKET/ref/ref.bin"
    log "seeded ref/ref.bin (${TASK_REF_MB} MiB) in $((SECONDS - t0)) s"
  fi
}

# env_clean CONTENDER: delete the large objects a contender wrote (keeps MinIO's disk small).
env_clean() {
  local p n
  for p in "w/$1-" "tout/$1/"; do
    n=$(python3 "$LIB/s3.py" delete-prefix "$BUCKET" "$p" 2>&1) || log "delete $p: $n"
  done
}
