#!/usr/bin/env bash
# ferry vs peer FUSE clients vs copy-in/copy-out, on one MinIO behind toxiproxy
# (20 ms + 100 MB/s per connection, downstream). One entry point:
#   bench/run.sh quick   seq/rand read (1 job, cold/warm), 256 MiB write, 1,000 x 4 KiB cp  (< 10 min)
#   bench/run.sh full    + 3 cold seq runs, 1/8/32 jobs, 10,000 small files, ls -l / stat of
#                         10,000 keys, the task workload
# Writes bench/results/<date>-<mode>.{csv,md,png|svg,log}. Needs root (drop_caches, FUSE),
# bin/ferry (make build) and the servers of `make setup`; bench/setup.sh adds s3fs, rclone
# and matplotlib. Env: BENCH_CONTENDERS="ferry s3fs ..." to restrict the FUSE contenders,
# BENCH_BASELINES="copy local" (or ""), BENCH_KEEP=1 to keep the scratch dir.
set -euo pipefail
BENCH_MODE=${1:-quick}
case $BENCH_MODE in quick | full) ;; *) sed -n '2,11p' "$0"; exit 2 ;; esac
export BENCH_MODE
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/bench/lib
TOOLS=${TOOLS:-$ROOT/.tools}
export PATH=$TOOLS/bin:$PATH PYTHONPATH=$TOOLS/py${PYTHONPATH:+:$PYTHONPATH}
unset AWS_CA_BUNDLE AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_S3_ENDPOINT
FERRY=${FERRY:-$ROOT/bin/ferry}

# Sizes, scaled to a 2-core / 24 GiB machine (see the report header).
BIG_MB=1024            # the object of the fio jobs (fits the page cache and every client's cache)
if [ "$BENCH_MODE" = quick ]; then
  SEQ_RUNS=1 JOBS="1" RAND_S=10 SMALL_TIMEOUT=120
else
  SEQ_RUNS=3 JOBS="1 8 32" RAND_S=20 SMALL_TIMEOUT=600
fi
SMALL10K_TIMEOUT=300 STAT_S=60
TASKS=4 TASK_REF_MB=1024 TASK_OUT_MB=128 TASK_COMPUTE_MIB=2000

DATE=$(date +%F)
RES=$ROOT/bench/results
mkdir -p "$RES"
OUT=$RES/$DATE-$BENCH_MODE
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

# cleanup: stop every process we started (newest first; ferry drains on SIGTERM),
# unmount every mount point we made, remove the scratch dir. Runs on any exit.
cleanup() {
  set +e
  [ -n "${RSS_LOOP:-}" ] && kill "$RSS_LOOP" 2>/dev/null
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

env_start
env_seed
mkdir -p "$W/localroot/big" && ln "$W/data/big.bin" "$W/localroot/big/1g.bin"

# Contender table for the report: name | version or "not installed" | mount command.
OPTS=$W/contenders.tsv
: >"$OPTS"
for c in ${BENCH_CONTENDERS:-${FUSE_CONTENDERS[*]}}; do
  if ! c_available "$c"; then
    printf '%s\tnot installed\t\n' "$c" >>"$OPTS"
    record "$c" installed no "" "$(c_bin "$c") not found on PATH"
    continue
  fi
  printf '%s\t%s\t%s\n' "$c" "$(c_version "$c")" "$(c_cmd "$c" | tr '\n' ' ' | sed "s#$W#\$W#g; s#$ROOT/##g; s#127.0.0.1:$FERRY_METRICS_PORT#127.0.0.1:PORT#; s#$BENCH_S3#http://127.0.0.1:PROXY#")" >>"$OPTS"
  log "== $c"
  C_PID=
  read_workloads "$c" || log "$c: read workloads aborted (mount failed)"
  write_workloads "$c" || log "$c: write workloads aborted (mount failed)"
  if [ "$BENCH_MODE" = full ]; then
    SMALL_TIMEOUT=$SMALL10K_TIMEOUT small10k_workloads "$c" || log "$c: small10k aborted"
    meta_workloads "$c" || log "$c: metadata aborted"
    c_umount "$c"
    [ -n "${TASK_COMPUTE_WALL:-}" ] || tasks_compute_ref
    if [ "$c" = ferry ]; then tasks_ferry; else tasks_fuse "$c" || log "$c: tasks aborted"; fi
  fi
  c_umount "$c"
  rm -rf "${W:?}/cache/$c"
done
for b in ${BENCH_BASELINES-copy local}; do
  log "== baseline $b"
  case $b in
    copy) printf 'copy\t%s\taws s3 cp (default settings: 10 concurrent requests, 8 MiB parts) via the proxy\n' \
      "$(aws --version 2>&1 | cut -d' ' -f1)" >>"$OPTS"; bench_copy ;;
    local) printf 'local\tfio %s\tfio/dd/cp on the local disk (/tmp)\n' "$(fio --version)" >>"$OPTS"; bench_local ;;
  esac
  if [ "$BENCH_MODE" = full ]; then
    [ -n "${TASK_COMPUTE_WALL:-}" ] || tasks_compute_ref
    "tasks_$b"
  fi
done

python3 "$LIB/report.py" --csv "$CSV" --contenders "$OPTS" --out "$OUT" --mode "$BENCH_MODE" \
  --env "MinIO $(minio --version 2>/dev/null | head -1 | awk '{print $3}') behind toxiproxy: +${LAT_MS} ms and ${RATE_KBPS} KB/s per connection (downstream); object ${BIG_MB} MiB; $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo); kernel $(uname -r)"
log "done: $OUT.md"
