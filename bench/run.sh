#!/usr/bin/env bash
# ferry vs peer FUSE clients vs copy-in/copy-out vs local disk, on one MinIO behind
# toxiproxy (20 ms + 100 MB/s per connection, downstream). One entry point:
#   bench/run.sh quick   fio seq 1 MiB / rand 4 KiB (1 job, cold/warm), 256 MiB writes,
#                        1,000 small files, a scan of 2,000 small objects and a Zarr-shaped
#                        read, ls -lR of 10,000 keys, a small task run  (< 10 min)
#   bench/run.sh full    the issue's suite scaled to the machine (sizes in the report) (< 60 min)
# Writes bench/results/<date>-<mode>.{csv,md,png|svg,log}. Needs root (drop_caches, FUSE),
# bin/ferry (make build) and the servers of `make setup`; bench/setup.sh adds s3fs, rclone
# and matplotlib. Env: BENCH_CONTENDERS="ferry s3fs ..." to restrict the FUSE contenders,
# BENCH_BASELINES="getfloor copy local" (or ""), BENCH_WORKLOADS="read write small meta tasks stage" (a subset
# to try the harness), BENCH_KEEP=1 to keep the scratch dir, BENCH_OUT=name for the result files
# (default <date>-<mode>), BENCH_TASK_RUNS=N runs of the task workload (full: 3) for BENCH_TASK_REPEAT
# (default "ferry s3fs copy"; their task rows are medians). Each contender and baseline gets a fresh toxiproxy process; its run is
# marked INVALID in the report when the machine swapped or a server exited during it.
set -euo pipefail
BENCH_MODE=${1:-quick}
case $BENCH_MODE in quick | full) ;; *) sed -n '2,13p' "$0"; exit 2 ;; esac
export BENCH_MODE
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/bench/lib
TOOLS=${TOOLS:-$ROOT/.tools}
export PATH=$TOOLS/bin:$PATH PYTHONPATH=$TOOLS/py${PYTHONPATH:+:$PYTHONPATH}
unset AWS_CA_BUNDLE AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_S3_ENDPOINT
FERRY=${FERRY:-$ROOT/bin/ferry}
BENCH_WORKLOADS=${BENCH_WORKLOADS:-read write small meta tasks stage}
want() { [[ " $BENCH_WORKLOADS " == *" $1 "* ]]; }

# Sizes, scaled to a 2-core / 24 GiB machine (stated in the report header).
# Caps (seconds) bound the slow clients (s3fs uploads each small file on close,
# ~0.4 s each); a capped run is reported as "timeout (> N s)", a lower bound.
BIG_MB=1024                      # the fio object (fits the page cache and every client's cache)
if [ "$BENCH_MODE" = quick ]; then
  SEQ_RUNS=1 JOBS="1" FIO_RT=6 PATTERNS="seq:1m rand:4k" WRITE_MB=256
  SMALL_N=1000 SMALL_CAP=60 LIST_CAP=60 TREE_N=10000 TREE_PER_DIR=1000 LSR_CAP=60 STAT_CAP=15
  SCAN_N=2000 SCAN_PER_DIR=1000 SCAN_CAP=120 ZARR_ROWS=20 ZARR_COLS=10 ZARR_SIZE=262144
  TASKS=2 TASK_COUNTS=2 TASK_REF_MB=256 TASK_OUT_MB=64 TASK_COMPUTE_MIB=1000 TASK_CAP=300 TASK_RUNS=${BENCH_TASK_RUNS:-1}
else
  SEQ_RUNS=5 JOBS="1 8 32" FIO_RT=10 PATTERNS="seq:1m seq:4k rand:4k rand:1m" WRITE_MB=1024
  SMALL_N=10000 SMALL_CAP=240 LIST_CAP=120 TREE_N=100000 TREE_PER_DIR=1000 LSR_CAP=300 STAT_CAP=60
  SCAN_N=10000 SCAN_PER_DIR=1000 SCAN_CAP=300 ZARR_ROWS=40 ZARR_COLS=25 ZARR_SIZE=262144
  TASKS=4 TASK_COUNTS="4 8" TASK_REF_MB=2048 TASK_OUT_MB=500 TASK_COMPUTE_MIB=2000 TASK_CAP=900 TASK_RUNS=${BENCH_TASK_RUNS:-3}
fi
TASK_REPEAT=${BENCH_TASK_REPEAT:-ferry s3fs copy}
SIZES="fio object ${BIG_MB} MiB, jobs ${JOBS// //}, each fio run capped at ${FIO_RT} s, seq 1 MiB cold 1 job = median of ${SEQ_RUNS} mounts (and of as many getfloor runs, each just before one of ferry's); writes ${WRITE_MB} MiB; small files ${SMALL_N} x 4 KiB (create capped at ${SMALL_CAP} s); scan of ${SCAN_N} x 1 KiB objects (${SCAN_PER_DIR} per directory) and a Zarr-shaped read of $((ZARR_ROWS * ZARR_COLS)) chunks of $((ZARR_SIZE >> 10)) KiB (each capped at ${SCAN_CAP} s); ls -lR of ${TREE_N} keys (${TREE_PER_DIR} per directory; capped at ${LSR_CAP} s); stat of ${SMALL_N} names (capped at ${STAT_CAP} s); task workload ${TASK_COUNTS// / and } tasks, shared reference ${TASK_REF_MB} MiB, ${TASK_OUT_MB} MiB output each, ${TASK_COMPUTE_MIB} MiB SHA-256 compute each; the task rows of ${TASK_REPEAT// /, } are the median of ${TASK_RUNS} runs (one run each for the others; client CPU and RSS totals count the first)"

DATE=$(date +%F)
RES=$ROOT/bench/results
mkdir -p "$RES"
OUT=$RES/${BENCH_OUT:-$DATE-$BENCH_MODE}
CSV=$OUT.csv
W=$(mktemp -d /tmp/ferry-bench.XXXXXX)
mkdir -p "$W/logs" "$W/mnt" "$W/cache"
: >"$W/pids"; : >"$W/mounts"
exec 2> >(tee "$OUT.log" >&2)

. "$LIB/common.sh"
. "$LIB/env.sh"
. "$LIB/contenders.sh"
. "$LIB/workloads.sh"
. "$LIB/baselines.sh"
. "$LIB/tasks.sh"
. "$ROOT/bench/stage.sh"

# cleanup: stop every process we started (newest first; ferry drains on SIGTERM),
# unmount every mount point we made, remove the scratch dir. Runs on any exit.
cleanup() {
  set +e
  [ -n "${RSS_LOOP:-}" ] && kill "$RSS_LOOP" 2>/dev/null
  [ -n "${BENCH_T0:-}" ] && log "total $((SECONDS - BENCH_T0)) s"
  local p m
  for p in $(tac "$W/pids"); do stop_pid "$p" 30; done
  for m in $(sort -u "$W/mounts"); do unmount "$m"; umount -l "$m" 2>/dev/null; done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then log "scratch kept in $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

"$ROOT/bench/setup.sh" >&2
[ -x "$FERRY" ] || { log "no $FERRY: run make build"; exit 1; }
FERRY_METRICS_PORT=$(free_port)
echo "contender,metric,value,unit,note" >"$CSV"
log "mode $BENCH_MODE, scratch $W, results $OUT.*"

BENCH_T0=$SECONDS
env_start
printf '[default]\ns3 =\n  max_concurrent_requests = 16\n  multipart_chunksize = 16MB\n  multipart_threshold = 16MB\n' >"$W/aws.config"
export AWS_CONFIG_FILE=$W/aws.config
env_seed
env_quiesce
mkdir -p "$W/localroot/big" && ln "$W/data/big.bin" "$W/localroot/big/big.bin"
tasks_compute_ref

# Contender table for the report: name | version or "not installed" | mount command.
OPTS=$W/contenders.tsv
: >"$OPTS"
# bench_baseline B: one baseline's run (a getfloor of its own runs before the contenders, so
# that the cold-read floor and ferry's cold reads see the same machine state).
bench_baseline() {
  local b=$1 n ct0
  log "== baseline $b"
  run_begin "$b" || { record "$b" valid INVALID "" "MinIO or the proxy could not be started"; return 0; }
  ct0=$SECONDS TOT_PEAK=0 TOT_CPU=0
  case $b in
    copy) printf 'copy\t%s\taws s3 cp via the proxy: parallel ranged GETs / multipart uploads, 16 concurrent requests of 16 MiB (AWS_CONFIG_FILE)\n' \
      "$(aws --version 2>&1 | cut -d' ' -f1)" >>"$OPTS"; bench_copy ;;
    local) printf 'local\tfio %s\tfio/dd/cp/ls/stat on the local disk (/tmp)\n' "$(fio --version)" >>"$OPTS"; bench_local ;;
    getfloor) getfloor_opts; bench_getfloor ;;
  esac
  if want tasks && [ "$b" != getfloor ]; then
    for n in $TASK_COUNTS; do tasks_round "$n"; task_runs "$b" "tasks_$b"; done
    tasks_round "${TASK_COUNTS%% *}"
  fi
  [ "$b" = copy ] && { record copy rss_peak "$TOT_PEAK" MiB "aws CLI; peak over all workloads"; record copy cpu_total "$TOT_CPU" s "aws CLI; user+sys over all workloads"; }
  run_end "$b"
  log "== baseline $b took $((SECONDS - ct0)) s"
}
BASELINES=" ${BENCH_BASELINES-getfloor copy local} "
# The getfloor runs paired with ferry's cold sequential runs (one before
# each, inside ferry's run) when both are measured; on its own otherwise.
GETFLOOR_PAIRED=0
if [[ $BASELINES == *" getfloor "* ]]; then
  if [[ " ${BENCH_CONTENDERS:-${FUSE_CONTENDERS[*]}} " == *" ferry "* ]] && want read; then
    GETFLOOR_PAIRED=1
    getfloor_opts "; each run just before one of ferry's cold sequential runs"
    getfloor_build || GETFLOOR_PAIRED=0
  else
    bench_baseline getfloor
  fi
fi
for c in ${BENCH_CONTENDERS:-${FUSE_CONTENDERS[*]}}; do
  if ! c_available "$c"; then
    printf '%s\tnot installed\t\n' "$c" >>"$OPTS"
    record "$c" installed no "" "$(c_bin "$c") not found on PATH"
    continue
  fi
  printf '%s\t%s\t%s\n' "$c" "$(c_version "$c")" "$(c_cmd "$c" | tr '\n' ' ' | sed "s#$W#\$W#g; s#$ROOT/##g; s#127.0.0.1:$FERRY_METRICS_PORT#127.0.0.1:PORT#; s#$BENCH_S3#http://127.0.0.1:PROXY#")" >>"$OPTS"
  log "== $c"
  run_begin "$c" || { record "$c" valid INVALID "" "MinIO or the proxy could not be started"; continue; }
  C_PID= TOT_PEAK=0 TOT_CPU=0 ct0=$SECONDS
  want read && { read_workloads "$c" || log "$c: read workloads aborted (mount failed)"; }
  want write && { write_workloads "$c" || log "$c: write workloads aborted (mount failed)"; }
  want small && { small_workloads "$c" || log "$c: small-file workloads aborted (mount failed)"; }
  want small && { scan_workloads "$c" || log "$c: small-object scans aborted (mount failed)"; }
  want meta && { meta_workloads "$c" || log "$c: metadata workloads aborted (mount failed)"; }
  c_umount "$c"
  if want tasks; then
    for n in $TASK_COUNTS; do
      tasks_round "$n"
      task_runs "$c" tasks_contender "$c"
    done
    tasks_round "${TASK_COUNTS%% *}"
  fi
  record "$c" rss_peak "$TOT_PEAK" MiB "peak over all workloads"
  record "$c" cpu_total "$TOT_CPU" s "user+sys over all workloads"
  run_end "$c"
  rm -rf "${W:?}/cache/$c"
  env_clean "$c"
  log "== $c took $((SECONDS - ct0)) s"
done
for b in $BASELINES; do [ "$b" = getfloor ] || bench_baseline "$b"; done

if want stage && [[ " ${BENCH_CONTENDERS:-${FUSE_CONTENDERS[*]}} " == *" ferry "* ]]; then
  log "== ferry: staged-input tasks (bench/stage.sh)"
  if run_begin ferry-stage; then
    stage_workload
    run_end ferry-stage
  else
    record ferry-stage valid INVALID "" "MinIO or the proxy could not be started"
  fi
fi

python3 "$LIB/report.py" --csv "$CSV" --contenders "$OPTS" --out "$OUT" --mode "$BENCH_MODE" --sizes "$SIZES" \
  --env "MinIO $(minio --version 2>/dev/null | head -1 | awk '{print $3}') behind toxiproxy: +${LAT_MS} ms and ${RATE_KBPS} KB/s per connection (downstream); $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo); kernel $(uname -r); total run time $(((SECONDS - BENCH_T0) / 60)) min"
log "done: $OUT.md"
