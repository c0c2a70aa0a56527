#!/usr/bin/env bash
# The write-path targets of the project's issues, measured on ferry alone
# (peer-bench setup: MinIO behind toxiproxy, +20 ms and 100 MB/s per
# connection on responses), REPS times on a fresh mount each, with medians:
#   dd of 256 MiB (1 MiB blocks): return, durable (HEAD on the direct port
#     shows the full size); the same dd onto the cache disk (+ sync) for
#     the ratio of write throughput to close;
#   cp of 1,000 x 4 KiB into a new directory (job 6 of the peer bench:
#     mkdir, then the timed cp of the files): return, all listed
#     (ListObjectsV2 on the direct port).
#   bench/targets.sh write [REPS]   (default 5; needs root, make setup, make build)
# and the read-path figures of ferry (issue 4), each fio run on a fresh mount
# for cold, with ferry's peak RSS per run:
#   bench/targets.sh read           seq 1 MiB cold 1/8/32 jobs, rand 4 KiB cold
#                                   32 jobs, warm seq 1 MiB and rand 4 KiB 1/32
#                                   jobs, and fio on the cache disk (warm
#                                   baseline, page cache dropped by fio)
#   bench/targets.sh ls [REPS]      ls -l of 10,000 keys in one directory, cold
#                                   (fresh mount, drop_caches), with the requests
#   bench/targets.sh lsr [REPS]     ls -lR of a tree of TREE_N keys (default
#                                   50,000, 1,000 per directory), cold, with
#                                   the requests
#   bench/targets.sh task [REPS]    the full bench's task workload, ferry only
#                                   (4 x ferry run on one cache dir, then the
#                                   same tasks on one ferry mount; 2 GiB reference;
#                                   TASK_SHARED=0: the ferry runs alone)
#   bench/targets.sh dirrand [REPS] a process reads a tenth of the 4 KiB files of
#                                   one directory of DIR_N (default 2,000) in random
#                                   order, whole, cold (fresh mount), with directory
#                                   readahead on and off: wall time, bytes read,
#                                   predicted and wasted (issue 24's rule)
#   bench/targets.sh small [REPS]   the full bench's small-file read-back: ls |
#                                   xargs -P 8 -n 100 cat of SMALL_N (default
#                                   10,000) x 4 KiB on a fresh mount, cold, with
#                                   ferry's and MinIO's CPU and the requests
#                                   (SMALL_SRC=ferry: created through ferry
#                                   first, with cp -r, as the full bench does)
#   bench/targets.sh cold [REPS]    seq 1 MiB cold 1 job (the full bench's cold-read
#                                   row), REPS fresh mounts: MiB/s, ferry's CPU per
#                                   GiB and peak RSS, the FUSE ops and requests
#                                   (PERF_OUT=prefix: a perf profile per run); each
#                                   run just after the getfloor and the cache floor
#                                   (bench/getfloor into a cache file a reader reads;
#                                   COLD_FLOORS=0: without them), with the ratios
#   bench/targets.sh floor [REPS]   the machine's floor for the write targets: a
#                                   plain AWS SDK program (bench/putfloor, no
#                                   FUSE, data in memory) PUTs 1,000 x 4 KiB (64
#                                   in flight; until listed, and MinIO's CPU) and
#                                   256 MiB as 16 x 16 MiB through the proxy
# PERF_OUT=prefix records a perf profile of ferry per phase (prefix.dd.N,
# prefix.cp.N; build an unstripped FERRY=… for symbols).
# Output: one line per run and the medians, on stderr and in
# bench/results/targets-<date>.log (not committed unless asked).
set -euo pipefail
MODE=${1:-write}
REPS=${2:-5}
case $MODE in write | read | cold | ls | lsr | task | dirrand | small | floor) ;; *) sed -n '2,53p' "$0"; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/bench/lib
TOOLS=${TOOLS:-$ROOT/.tools}
export PATH=$TOOLS/bin:$PATH
unset AWS_CA_BUNDLE AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_S3_ENDPOINT
FERRY=${FERRY:-$ROOT/bin/ferry}
W=$(mktemp -d /tmp/ferry-targets.XXXXXX)
mkdir -p "$W/logs" "$W/mnt" "$W/cache"
: >"$W/pids"; : >"$W/mounts"
CSV=$W/targets.csv
mkdir -p "$ROOT/bench/results"
exec 2> >(tee "$ROOT/bench/results/targets-$(date +%F).log" >&2)

. "$LIB/common.sh"
. "$LIB/env.sh"
. "$LIB/contenders.sh"
. "$LIB/workloads.sh"

cleanup() {
  set +e
  local p m
  for p in $(tac "$W/pids"); do stop_pid "$p" 60; done
  for m in $(sort -u "$W/mounts"); do unmount "$m"; done
  if [ "${TARGETS_KEEP:-0}" = 1 ]; then log "scratch kept in $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

FERRY_METRICS_PORT=$(free_port)
# reqs: ferry's backend requests so far, by operation (from /metrics).
reqs() { curl -fs "http://127.0.0.1:$FERRY_METRICS_PORT/metrics" | awk '/^ferry_backend_requests_total/{sub(/.*op="/,""); split($0,a,"\""); n[a[1]]+=$NF} END{for(k in n) printf "%s=%d ", k, n[k]}'; }
# fuseops: ferry's FUSE operations so far, by op (from /metrics).
fuseops() { curl -fs "http://127.0.0.1:$FERRY_METRICS_PORT/metrics" | awk '/^ferry_fuse_opens_total/{sub(/.*mode="/,""); split($0,a,"\""); printf "open-%s=%d ", a[1], $NF} /^ferry_fuse_ops_total/{sub(/.*op="/,""); split($0,a,"\""); n[a[1]]+=$NF} END{for(k in n) printf "%s=%d ", k, n[k]}'; }
# perf_start NAME / perf_stop: with PERF_OUT, a perf profile of ferry ($C_PID).
perf_start() { [ -z "${PERF_OUT:-}" ] || { perf record -q -F 999 -g -p "$C_PID" -o "$PERF_OUT.$1" 2>/dev/null & PERF_PID=$!; }; }
perf_stop() { [ -z "${PERF_OUT:-}" ] || { kill -INT "$PERF_PID"; wait "$PERF_PID" || true; }; }
# dra: ferry's directory-readahead counters so far (from /metrics).
dra() { curl -fs "http://127.0.0.1:$FERRY_METRICS_PORT/metrics" | awk '/^ferry_dir_readahead_(files|predicted|hit|wasted)_bytes_total/{sub(/^ferry_dir_readahead_/,""); sub(/(_bytes)?_total/,""); printf "%s=%d ", $1, $NF}'; }
# FERRY_EXTRA="--flag value ...": more words for ferry's mount command (A/B runs).
if [ -n "${FERRY_EXTRA:-}" ]; then
  eval "$(declare -f c_cmd | sed '1s/c_cmd/c_cmd_base/')"
  c_cmd() { c_cmd_base "$@" | awk -v x="$FERRY_EXTRA" '{print} NR == 2 {n = split(x, a, " "); for (i = 1; i <= n; i++) print a[i]}'; }
fi
env_start
if [ "$MODE" = floor ]; then
  (cd "$ROOT" && go build -o "$W/putfloor" ./bench/putfloor)
  declare -a FL FB
  for r in $(seq "$REPS"); do
    m0=$(minio_cpu) t0=$(now)
    "$W/putfloor" "$BENCH_S3" "$BUCKET" "floor$r/s" 1000 64 4096 >&2
    out=$(python3 "$LIB/s3.py" wait-count "$BUCKET" "floor$r/s" 1000 120)
    fl=$(elapsed "$t0" "$out") m1=$(minio_cpu)
    t0=$(now)
    "$W/putfloor" "$BENCH_S3" "$BUCKET" "floorbig$r/" 16 16 16777216 >&2
    fb=$(elapsed "$t0" "$(now)")
    log "run $r: 1,000 x 4 KiB listed after $fl s (MinIO CPU $(elapsed "$m0" "$m1") s incl. the polls); 256 MiB as 16 x 16 MiB in $fb s"
    FL+=("$fl") FB+=("$fb")
  done
  log "medians of $REPS: 1,000 x 4 KiB listed after $(echo "${FL[*]}" | median) s; 256 MiB in $(echo "${FB[*]}" | median) s"
  exit 0
fi
if [ "$MODE" = task ]; then
  . "$LIB/tasks.sh"
  TASKS=${TASKS:-4} TASK_REF_MB=${TASK_REF_MB:-2048} TASK_OUT_MB=500 TASK_COMPUTE_MIB=2000 TASK_CAP=900
  mkdir -p "$W/data"
  head -c "${TASK_REF_MB}M" /dev/urandom >"$W/data/ref.bin"
  head -c "${TASK_OUT_MB}M" /dev/urandom >"$W/data/out.bin"
  aws_direct s3 cp "$W/data/ref.bin" "s3://$BUCKET/ref/ref.bin"
  env_quiesce # MinIO scans what it was given: not during the first run
  echo "contender,metric,value,unit,note" >"$CSV"
  tasks_compute_ref
  for r in $(seq "$REPS"); do
    phase_reset
    ferry_tasks 1 "tout/ferry$r/"
    tasks_finish ferry "$T0" "$FAILED" "tout/ferry$r/" "" "one ferry run per task; $TT_NOTE"
    phase_record ferry task "the $TASKS ferry processes"
    rm -rf "$W/cache/ferry-task"
    [ "${TASK_SHARED:-1}" = 0 ] || tasks_fuse ferry "tout/shared$r/" _shared
  done
  exit 0
fi
if [ "$MODE" = dirrand ]; then
  DIR_N=${DIR_N:-2000}
  python3 "$LIB/s3.py" put-many "$BUCKET" rnd/ "$DIR_N" 4096
  # ferry's mount command with --dir-readahead=$DRA after "mount".
  eval "$(declare -f c_cmd | sed '1s/c_cmd/c_cmd_plain/')"
  c_cmd() { c_cmd_plain "$@" | awk -v d="--dir-readahead=$DRA" '{print} NR == 2 {print d}'; }
  declare -A DT
  for r in $(seq "$REPS"); do
    for DRA in on off; do
      c_cold ferry
      export C_ROOT
      timed_cmd 600 python3 -c '
import os, random, sys
d = os.path.join(os.environ["C_ROOT"], "rnd")
names = sorted(os.listdir(d))
random.seed(int(sys.argv[1]))
n = 0
for name in random.sample(names, len(names) // 10):
    with open(os.path.join(d, name), "rb") as f:
        n += len(f.read())
open(sys.argv[2], "w").write(str(n))
' "$r" "$W/dirread"
      t=$(elapsed "$T_START" "$T_END")
      DT[$DRA]+="$t "
      log "run $r, dir readahead $DRA: read $(cat "$W/dirread") bytes of $((DIR_N / 10)) files in $t s; $(dra); requests: $(reqs)"
    done
  done
  c_umount ferry
  log "medians of $REPS: dir readahead on $(echo "${DT[on]}" | median) s, off $(echo "${DT[off]}" | median) s"
  exit 0
fi
if [ "$MODE" = small ]; then
  SMALL_N=${SMALL_N:-10000}
  if [ "${SMALL_SRC:-put}" = ferry ]; then
    # As the full bench: the files are created through ferry (cp -r), so
    # the objects carry ferry's metadata.
    mkdir -p "$W/data/smallrb"
    python3 -c 'import os, sys
for i in range(int(sys.argv[2])): open("%s/t%05d" % (sys.argv[1], i), "wb").write(os.urandom(4096))' "$W/data/smallrb" "$SMALL_N"
    c_cold ferry
    cp -r "$W/data/smallrb" "$C_ROOT/smallrb"
    python3 "$LIB/s3.py" wait-count "$BUCKET" smallrb/t "$SMALL_N" 600 >/dev/null
  else
    python3 "$LIB/s3.py" put-many "$BUCKET" smallrb/ "$SMALL_N" 4096
  fi
  pcpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }
  declare -a ST
  for r in $(seq "$REPS"); do
    c_cold ferry
    f0=$(pcpu "$C_PID") m0=$(pcpu "$MINIO_PID") x0=$(pcpu "$TOXI_PID")
    read -r _ a b c i w _ </proc/stat
    perf_start small.$r
    timed_cmd 600 bash -c "cd '$C_ROOT/smallrb' && ls | xargs -P 8 -n 100 cat | wc -c >'$W/bytes'"
    perf_stop
    t=$(elapsed "$T_START" "$T_END")
    ST+=("$t")
    read -r _ a2 b2 c2 i2 w2 _ </proc/stat
    log "run $r: $(cat "$W/bytes") bytes in $t s; CPU ferry $(elapsed "$f0" "$(pcpu "$C_PID")") s, MinIO $(elapsed "$m0" "$(pcpu "$MINIO_PID")") s, proxy $(elapsed "$x0" "$(pcpu "$TOXI_PID")") s, machine idle $(((i2 - i) * 100 / (a2 + b2 + c2 + i2 + w2 - a - b - c - i - w)))% + iowait $(((w2 - w) * 100 / (a2 + b2 + c2 + i2 + w2 - a - b - c - i - w)))%; load $(cut -d' ' -f1 /proc/loadavg); $(dra)requests: $(reqs)FUSE: $(fuseops)"
  done
  c_umount ferry
  log "median of $REPS: $(echo "${ST[*]}" | median) s"
  exit 0
fi
if [ "$MODE" = ls ] || [ "$MODE" = lsr ]; then
  # ls: one directory of 10,000 keys (lines of ls -l); lsr: a tree (files of ls -lR).
  if [ "$MODE" = ls ]; then
    python3 "$LIB/s3.py" put-many "$BUCKET" many/ 10000 1024
    what="ls -l of many/" walk='ls -l "$C_ROOT/many" | wc -l'
  else
    python3 "$LIB/s3.py" put-many "$BUCKET" tree/ "${TREE_N:-50000}" 64 1000
    what="ls -lR of tree/" walk='ls -lR "$C_ROOT/tree" | grep -c "^-"'
  fi
  for r in $(seq "$REPS"); do
    c_cold ferry
    export C_ROOT # the walk's shell expands it
    timed_cmd 600 bash -c "$walk >'$W/lscount'"
    log "run $r: $what: $(cat "$W/lscount") in $(elapsed "$T_START" "$T_END") s; requests: $(reqs); FUSE: $(fuseops)"
  done
  exit 0
fi
if [ "$MODE" = cold ]; then
  BIG_MB=1024 FIO_RT=${FIO_RT:-10}
  mkdir -p "$W/data/big"
  head -c "${BIG_MB}M" /dev/urandom >"$W/data/big/big.bin"
  aws_direct s3 cp "$W/data/big/big.bin" "s3://$BUCKET/big/big.bin"
  declare -a CB CC GB CF
  (cd "$ROOT" && go build -o "$W/getfloor" ./bench/getfloor)
  for r in $(seq "$REPS"); do
    if [ "${COLD_FLOORS:-1}" = 1 ]; then
      # the floors just before ferry's run: plain GETs into io.Discard, and
      # the same GETs written into a file on the cache disk that a reader
      # reads as they land (bench/getfloor's cache mode)
      drop_caches
      g=$("$W/getfloor" "$BENCH_S3" "$BUCKET" big/big.bin 16 8388608)
      drop_caches
      f=$("$W/getfloor" "$BENCH_S3" "$BUCKET" big/big.bin 16 8388608 "$W/cache/cachefloor.bin")
      GB+=("${g%% MiB/s*}") CF+=("${f%% MiB/s*}")
      log "run $r: getfloor $g; cache floor $f"
    fi
    c_cold ferry
    rss_start "$C_PID" --tree
    perf_start cold.$r
    read -r bw _ <<<"$(fio_read "seq-1m-cold-1j-$r" "$C_ROOT" seq 1m 1)"
    perf_stop
    rss_stop
    cg=$(awk -v c="${RSS_RESULT#* }" -v m="$BIG_MB" 'BEGIN{printf "%.3f", c / (m / 1024)}')
    CB+=("$bw") CC+=("$cg")
    [ "${COLD_MEM:-0}" = 1 ] && { curl -fs "http://127.0.0.1:$FERRY_METRICS_PORT/metrics" | grep -E "^go_memstats_(heap_(inuse|sys|idle|released)|stack_inuse|sys|mspan_inuse|other_sys|gc_sys)_bytes|^go_goroutines|^go_threads" >&2; grep -E "Rss|Anon|File|Shmem" "/proc/$C_PID/smaps_rollup" >&2; }
    log "run $r: $bw MiB/s; ferry CPU $cg s/GiB, peak RSS ${RSS_RESULT%% *} MiB; load $(cut -d' ' -f1 /proc/loadavg); requests: $(reqs)FUSE: $(fuseops)"
  done
  c_umount ferry
  log "medians of $REPS: $(echo "${CB[*]}" | median) MiB/s, $(echo "${CC[*]}" | median) s/GiB"
  if [ ${#GB[@]} -gt 0 ]; then
    gm=$(echo "${GB[*]}" | median) fm=$(echo "${CF[*]}" | median) cm=$(echo "${CB[*]}" | median)
    log "floors, medians of $REPS: getfloor $gm MiB/s, cache floor $fm MiB/s ($(awk -v a="$fm" -v b="$gm" 'BEGIN{printf "%.2f", a / b}')x the getfloor); ferry $(awk -v a="$cm" -v b="$gm" 'BEGIN{printf "%.2f", a / b}')x the getfloor, $(awk -v a="$cm" -v b="$fm" 'BEGIN{printf "%.2f", a / b}')x the cache floor"
  fi
  exit 0
fi
if [ "$MODE" = read ]; then
  BIG_MB=1024 FIO_RT=${FIO_RT:-10}
  mkdir -p "$W/data/big"
  head -c "${BIG_MB}M" /dev/urandom >"$W/data/big/big.bin"
  aws_direct s3 cp "$W/data/big/big.bin" "s3://$BUCKET/big/big.bin"
  rss_run() { # rss_run LABEL ROOT PAT BS JOBS: one fio run with ferry's peak RSS
    local res
    [ -z "${C_PID:-}" ] || rss_start "$C_PID"
    res=$(fio_read "$1" "$2" "$3" "$4" "$5")
    rss_stop
    read -r bw iops p50 p99 <<<"$res"
    log "$1: $bw MiB/s, $iops IOPS, p50 $p50 us, p99 $p99 us; ferry peak RSS ${RSS_RESULT%% *} MiB, CPU ${RSS_RESULT#* } s"
  }
  for j in 1 8 32; do c_cold ferry; rss_run "seq-1m-cold-${j}j" "$C_ROOT" seq 1m "$j"; done
  c_cold ferry; rss_run rand-4k-cold-32j "$C_ROOT" rand 4k 32
  c_cold ferry; rss_run rand-1m-cold-32j "$C_ROOT" rand 1m 32
  c_cold ferry; rss_run seq-4k-cold-32j "$C_ROOT" seq 4k 32
  c_cold ferry; cat "$C_ROOT/big/big.bin" >/dev/null
  for j in 1 32; do rss_run "seq-1m-warm-${j}j" "$C_ROOT" seq 1m "$j"; rss_run "rand-4k-warm-${j}j" "$C_ROOT" rand 4k "$j"; done
  rss_run rand-1m-warm-32j "$C_ROOT" rand 1m 32
  c_umount ferry
  for j in 1 32; do drop_caches; rss_run "local-seq-1m-${j}j" "$W/data" seq 1m "$j"; rss_run "local-rand-4k-${j}j" "$W/data" rand 4k "$j"; done
  exit 0
fi
mkdir -p "$W/data/small1000"
head -c "${WRITE_MB:-256}M" /dev/urandom >"$W/data/256m.bin"
python3 - "$W/data/small1000" <<'PY'
import os, sys
for i in range(1000):
    open("%s/s%04d.txt" % (sys.argv[1], i), "wb").write(os.urandom(4096))
PY

# cpu PID...: the summed user+sys CPU seconds of the processes.
cpu() { local p t=0; for p; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; awk -v t=$t 'BEGIN{printf "%.2f", t/100}'; }
# TOXI_PID: set by env_start (lib/env.sh proxy_start)

# TIMELINE=1: during each dd and cp, every 0.1 s, the Puts and bytes ferry
# sent (finished requests) and the
# machine's busy CPU share (from /proc/stat) over that 0.1 s.
tl_start() {
  [ "${TIMELINE:-0}" = 1 ] || return 0
  (t0=$(now); read -r _ a b c i w x y z _ </proc/stat; pb=$((a + b + c + x + y + z)); pt=$((pb + i + w))
    while sleep 0.1; do
      read -r _ a b c i w x y z _ </proc/stat; nb=$((a + b + c + x + y + z)); nt=$((nb + i + w))
      puts=$(curl -fs "http://127.0.0.1:$FERRY_METRICS_PORT/metrics" | awk '/^ferry_backend_requests_total.*op="Put"/{n+=$NF} /^ferry_backend_written_bytes_total/{b+=$NF} END{printf "%d MiB=%d", n, b/1048576}')
      printf '%s puts=%s cpu=%s%%\n' "$(elapsed "$t0" "$(now)")" "$puts" $(((nb - pb) * 100 / (nt - pt > 0 ? nt - pt : 1))) >&2
      pb=$nb pt=$nt
    done) & TL_PID=$!
}
tl_stop() { [ "${TIMELINE:-0}" = 1 ] || return 0; kill "$TL_PID" 2>/dev/null; wait "$TL_PID" 2>/dev/null || true; }

declare -a DDR DDD CPR CPL LOC
for r in $(seq "$REPS"); do
  c_cold ferry
  mkdir -p "$C_ROOT/w$r"
  sleep 1 # let the mount's start-up work (spare staging files) settle
  c0=$(cpu "$C_PID") m0=$(cpu "$MINIO_PID") x0=$(cpu "$TOXI_PID")
  perf_start "dd.$r"
  tl_start
  timed_cmd 300 dd if="$W/data/256m.bin" of="$C_ROOT/w$r/256m.bin" bs=1M status=none
  ddr=$(elapsed "$T_START" "$T_END")
  out=$(python3 "$LIB/s3.py" wait-size "$BUCKET" "w$r/256m.bin" $((${WRITE_MB:-256} << 20)) 120)
  ddd=$(elapsed "$T_START" "$out")
  tl_stop
  perf_stop
  log "  dd CPU s: ferry $(elapsed "$c0" "$(cpu "$C_PID")"), minio $(elapsed "$m0" "$(cpu "$MINIO_PID")"), toxiproxy $(elapsed "$x0" "$(cpu "$TOXI_PID")")"
  sleep 1
  c0=$(cpu "$C_PID") m0=$(cpu "$MINIO_PID") x0=$(cpu "$TOXI_PID")
  perf_start "cp.$r"
  tl_start
  mkdir "$C_ROOT/small$r"
  timed_cmd 300 sh -c "cp '$W'/data/small1000/* '$C_ROOT/small$r/'"
  cpr=$(elapsed "$T_START" "$T_END")
  c1=$(cpu "$C_PID") m1=$(cpu "$MINIO_PID")
  out=$(python3 "$LIB/s3.py" wait-count "$BUCKET" "small$r/s" 1000 120)
  cpl=$(elapsed "$T_START" "$out")
  tl_stop
  perf_stop
  log "  requests after cp: $(reqs)"
  log "  FUSE ops after cp: $(fuseops)"
  log "  cp CPU s: ferry $(elapsed "$c0" "$(cpu "$C_PID")"), minio $(elapsed "$m0" "$(cpu "$MINIO_PID")"), toxiproxy $(elapsed "$x0" "$(cpu "$TOXI_PID")"); until cp returned: ferry $(elapsed "$c0" "$c1"), minio $(elapsed "$m0" "$m1")"
  # The same dd onto the cache disk, + sync (durable locally).
  drop_caches
  t0=$(now)
  dd if="$W/data/256m.bin" of="$W/cache/local-$r.bin" bs=1M status=none conv=fsync
  loc=$(elapsed "$t0" "$(now)")
  rm -f "$W/cache/local-$r.bin"
  log "run $r: dd 256 MiB return $ddr s, durable $ddd s (local dd+fsync $loc s); cp 1000 x 4 KiB return $cpr s, all listed $cpl s"
  DDR+=("$ddr") DDD+=("$ddd") CPR+=("$cpr") CPL+=("$cpl") LOC+=("$loc")
done
c_umount ferry
m_ddr=$(echo "${DDR[*]}" | median) m_ddd=$(echo "${DDD[*]}" | median)
m_cpr=$(echo "${CPR[*]}" | median) m_cpl=$(echo "${CPL[*]}" | median) m_loc=$(echo "${LOC[*]}" | median)
log "medians of $REPS: dd 256 MiB return $m_ddr s (target 0.6), durable $m_ddd s (target 1.2); cp 1000 x 4 KiB return $m_cpr s (target 0.5), all listed $m_cpl s (target 1.5)"
log "write throughput to close: $(awk -v a="$m_ddr" 'BEGIN{printf "%.0f", 256/a}') MiB/s = $(awk -v a="$m_ddr" -v b="$m_loc" 'BEGIN{printf "%.2f", b/a}') x dd onto the cache disk with fsync ($(awk -v b="$m_loc" 'BEGIN{printf "%.0f", 256/b}') MiB/s)"
