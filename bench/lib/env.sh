# Benchmark environment: MinIO on a free loopback port behind toxiproxy
# (20 ms downstream latency + 102400 KB/s downstream bandwidth per connection,
# the setup of ../shared/reference/peer-bench.md), a fresh toxiproxy process
# per contender with the validity checks of its run, and the seed data.
#   BENCH_S3_DIRECT  unproxied endpoint (setup uploads and durability polls)
#   BENCH_S3         proxied endpoint every contender uses
BUCKET=ferrybench
LAT_MS=${BENCH_LAT_MS:-20}
RATE_KBPS=${BENCH_RATE_KBPS:-102400}

env_start() {
  MINIO_PORT=$(free_port) MINIO_CONSOLE_PORT=$(free_port) PROXY_PORT=$(free_port)
  export MINIO_ROOT_USER=minioadmin MINIO_ROOT_PASSWORD=minioadmin
  export AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin
  export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
  export BENCH_S3_DIRECT=http://127.0.0.1:$MINIO_PORT BENCH_S3=http://127.0.0.1:$PROXY_PORT
  minio_start || return 1
  proxy_start || return 1
  python3 "$LIB/s3.py" mkbucket "$BUCKET"
  log "MinIO $BENCH_S3_DIRECT, proxy $BENCH_S3 (+${LAT_MS} ms, ${RATE_KBPS} KB/s per connection), bucket $BUCKET"
}

# minio_ready: MinIO answers its readiness probe (3 tries over ~6 s, so that a
# busy MinIO is not taken for a dead one).
minio_ready() {
  local i
  for i in 1 2 3; do
    curl -fs -m 5 "$BENCH_S3_DIRECT/minio/health/ready" >/dev/null && return 0
    sleep 1
  done
  return 1
}

# minio_start: MinIO on $MINIO_PORT over the data in $W/minio; sets MINIO_PID.
minio_start() {
  local i
  bg minio minio server "$W/minio" --address "127.0.0.1:$MINIO_PORT" --console-address "127.0.0.1:$MINIO_CONSOLE_PORT" --quiet
  MINIO_PID=$BG_PID
  for i in $(seq 150); do curl -fs "$BENCH_S3_DIRECT/minio/health/ready" >/dev/null && return 0; sleep 0.2; done
  log "MinIO did not start"
  return 1
}

# proxy_start: a new toxiproxy process (API on a free port) with one proxy,
# listening on $PROXY_PORT (BENCH_S3) in front of MinIO, with the latency and
# bandwidth toxics; sets TOXI_PID and TOXI_API. run.sh starts one per
# contender (toxiproxy 2.12's memory grows with the traffic it has carried).
proxy_start() {
  local i made=
  TOXI_API=http://127.0.0.1:$(free_port)
  bg toxiproxy toxiproxy-server -host 127.0.0.1 -port "${TOXI_API##*:}"
  TOXI_PID=$BG_PID
  for i in $(seq 100); do curl -fs "$TOXI_API/version" >/dev/null && break; sleep 0.1; done
  # The proxy's port may still be held for a moment by the previous
  # proxy's process (one s3fs run of 2026-12-01 lost its proxy so): retry.
  for i in $(seq 50); do
    curl -fsS -X POST "$TOXI_API/proxies" -H 'Content-Type: application/json' \
      -d "{\"name\":\"s3\",\"listen\":\"127.0.0.1:$PROXY_PORT\",\"upstream\":\"127.0.0.1:$MINIO_PORT\",\"enabled\":true}" \
      >/dev/null 2>"$W/logs/toxiproxy-create.err" && { made=1; break; }
    sleep 0.2
  done
  [ -n "$made" ] &&
    curl -fs -X POST "$TOXI_API/proxies/s3/toxics" -H 'Content-Type: application/json' \
      -d "{\"name\":\"lat_down\",\"type\":\"latency\",\"stream\":\"downstream\",\"toxicity\":1,\"attributes\":{\"latency\":$LAT_MS,\"jitter\":0}}" >/dev/null &&
    curl -fs -X POST "$TOXI_API/proxies/s3/toxics" -H 'Content-Type: application/json' \
      -d "{\"name\":\"bw_down\",\"type\":\"bandwidth\",\"stream\":\"downstream\",\"toxicity\":1,\"attributes\":{\"rate\":$RATE_KBPS}}" >/dev/null ||
    { log "toxiproxy did not start: $(cat "$W/logs/toxiproxy-create.err" 2>/dev/null) $(grep -v '"level":"\(debug\|trace\)"' "$W/logs/toxiproxy.log" | tail -3 | tr '\n' ' ')"; return 1; }
}

proxy_stop() {
  [ -n "${TOXI_PID:-}" ] || return 0
  stop_pid "$TOXI_PID" 10
  wait "$TOXI_PID" 2>/dev/null || true
  TOXI_PID=
}

# Validity of one contender's run. run_begin NAME starts a fresh proxy,
# restarts MinIO if it is gone, resets MinIO's peak RSS (clear_refs 5) and
# notes the machine's swap-in count; run_end NAME records the proxy's and
# MinIO's peak RSS (VmHWM), the pages swapped in and the server restarts,
# and "valid" = yes, or INVALID with the reasons: the machine swapped
# (pswpin grew), MinIO or the proxy exited or restarted, or MinIO was not
# ready at the end.
pswpin() { awk '$1 == "pswpin" {print $2}' /proc/vmstat; }
peak_mib() {
  local v
  v=$(awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status" 2>/dev/null) || v=
  echo "${v:-n/a}"
}
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

run_begin() {
  RUN_REASONS=()
  if ! alive "$MINIO_PID" || ! minio_ready; then
    log "MinIO (pid $MINIO_PID) is gone or not ready before $1: restarting it"
    alive "$MINIO_PID" && stop_pid "$MINIO_PID" 10
    minio_start || return 1
  fi
  proxy_stop # the previous run's (or env_start's)
  proxy_start || return 1
  RUN_MINIO_PID=$MINIO_PID RUN_TOXI_PID=$TOXI_PID
  echo 5 >"/proc/$MINIO_PID/clear_refs" 2>/dev/null || log "cannot reset MinIO's peak RSS (not root?): its figure is its lifetime peak"
  RUN_SWAPIN0=$(pswpin)
}

run_end() {
  local c=$1 proxy_rss minio_rss swapin restarts=0 why
  proxy_rss=$(peak_mib "$RUN_TOXI_PID") minio_rss=$(peak_mib "$RUN_MINIO_PID")
  swapin=$(($(pswpin) - RUN_SWAPIN0))
  [ "$swapin" -gt 0 ] && RUN_REASONS+=("the machine swapped in $swapin pages")
  if ! alive "$RUN_MINIO_PID" || [ "$MINIO_PID" != "$RUN_MINIO_PID" ]; then
    RUN_REASONS+=("MinIO (pid $RUN_MINIO_PID) exited or restarted"); restarts=$((restarts + 1))
  elif ! minio_ready; then
    RUN_REASONS+=("MinIO was not ready at the end"); restarts=$((restarts + 1))
  fi
  if ! alive "$RUN_TOXI_PID" || [ "$TOXI_PID" != "$RUN_TOXI_PID" ]; then
    RUN_REASONS+=("the proxy (pid $RUN_TOXI_PID) exited or restarted"); restarts=$((restarts + 1))
  fi
  proxy_stop
  record "$c" proxy_rss_peak "$proxy_rss" MiB "toxiproxy; a fresh process for this run"
  record "$c" minio_rss_peak "$minio_rss" MiB "MinIO; peak during this run"
  record "$c" swapin "$swapin" pages "pswpin of /proc/vmstat during this run"
  record "$c" server_restarts "$restarts" "" "MinIO or the proxy exited or restarted; or MinIO not ready at the end"
  if [ ${#RUN_REASONS[@]} -eq 0 ]; then
    record "$c" valid yes "" ""
  else
    why=$(IFS=';'; echo "${RUN_REASONS[*]}")
    record "$c" valid INVALID "" "$why"
    log "$c: this run is INVALID: $why"
  fi
}

# aws CLI against the unproxied port (setup only, not measured).
aws_direct() { aws --endpoint-url "$BENCH_S3_DIRECT" --only-show-errors "$@"; }
# aws CLI through the proxy (the copy baseline).
aws_proxy() { aws --endpoint-url "$BENCH_S3" --only-show-errors "$@"; }

# env_seed: local data in $W/data and the objects the workloads read (sizes from run.sh).
#   big/big.bin     BIG_MB MiB, random (the fio object)
#   smallseed/      SMALL_N x 4 KiB (list/stat/read-back when a client's create timed out)
#   tree/           TREE_N keys of 100 bytes, TREE_PER_DIR per directory (ls -lR)
#   scan/           SCAN_N keys of 1 KiB, SCAN_PER_DIR per directory (find -exec cat)
#   zarr/           a Zarr v2 array: .zarray and ZARR_ROWS x ZARR_COLS chunks of ZARR_SIZE bytes
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
  if [ "${SCAN_N:-0}" -gt 0 ]; then
    t0=$SECONDS
    python3 "$LIB/s3.py" put-many "$BUCKET" scan/ "$SCAN_N" 1024 "$SCAN_PER_DIR"
    python3 "$LIB/s3.py" put-zarr "$BUCKET" zarr/ "$ZARR_ROWS" "$ZARR_COLS" "$ZARR_SIZE"
    log "seeded scan/ ($SCAN_N x 1 KiB) and zarr/ ($((ZARR_ROWS * ZARR_COLS)) chunks) in $((SECONDS - t0)) s"
  fi
  if [ "${TASKS:-0}" -gt 0 ]; then
    t0=$SECONDS
    head -c "${TASK_REF_MB}M" /dev/urandom >"$d/ref.bin"
    head -c "${TASK_OUT_MB}M" /dev/urandom >"$d/out.bin"
    aws_direct s3 cp "$d/ref.bin" "s3://$BUCKET/ref/ref.bin"
    log "seeded ref/ref.bin (${TASK_REF_MB} MiB) in $((SECONDS - t0)) s"
  fi
}

# minio_cpu: MinIO's user+sys CPU seconds so far.
minio_cpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$MINIO_PID/stat" 2>/dev/null || echo 0; }

# env_quiesce: after seeding, MinIO keeps scanning and healing what it was given
# (on 2 cores that took CPU from the first contender's cold reads): sync, then wait
# until MinIO used under 0.1 CPU-s in 5 s, at most QUIESCE_MAX (300) s; logs the wait.
env_quiesce() {
  local t0=$SECONDS c0 c1
  sync
  while [ $((SECONDS - t0)) -lt "${QUIESCE_MAX:-300}" ]; do
    c0=$(minio_cpu); sleep 5; c1=$(minio_cpu)
    awk -v a="$c0" -v b="$c1" 'BEGIN{exit !(b - a < 0.1)}' && { log "MinIO quiet after $((SECONDS - t0)) s"; return 0; }
  done
  log "MinIO still busy after $((SECONDS - t0)) s (last 5 s: $(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b - a}') CPU-s); going on"
}

# env_clean CONTENDER: delete the large objects a contender wrote (keeps MinIO's disk small).
env_clean() {
  local p n
  for p in "w/$1-" "tout/$1/" "tout/$1_"; do
    n=$(python3 "$LIB/s3.py" delete-prefix "$BUCKET" "$p" 2>&1) || log "delete $p: $n"
  done
}
