# Workloads run against one FUSE contender (bench_fuse NAME). "Cold" always means
# c_cold: unmount, wait for the daemon to exit, empty its cache dir, drop_caches,
# mount again. fio keeps its default invalidate=1, so "warm" shows the client's
# own cache, not the page cache. Metric names are listed in lib/report.py.

# peak "RSS_MiB CPU_s" (rss_stop's output): keep the peak RSS in PEAK, sum CPU in CPU.
PEAK=0 CPU=0
peak() {
  [ "${1%% *}" -gt "$PEAK" ] 2>/dev/null && PEAK=${1%% *}
  CPU=$(awk -v a="$CPU" -v b="${1#* }" 'BEGIN{printf "%.2f", a+b}')
}

# fio_seq LABEL ROOT JOBS: 1 MiB sequential reads; JOBS jobs split the file.
fio_seq() {
  local n=$3 part=$((BIG_MB / $3))
  fio_run "$1" --name=seq --filename="$2/big/1g.bin" --rw=read --bs=1M --readonly \
    --numjobs="$n" --size="${part}m" --offset_increment="${part}m"
}
# fio_rand LABEL ROOT JOBS SECONDS: 4 KiB random reads over the whole file.
fio_rand() {
  fio_run "$1" --name=rand --filename="$2/big/1g.bin" --rw=randread --bs=4k --readonly \
    --numjobs="$3" --size="${BIG_MB}m" --runtime="$4" --time_based
}

# rec_fio CONTENDER METRIC "MiB/s IOPS p50 p99" FIELD(bw|iops) [NOTE]
rec_fio() {
  local c=$1 m=$2 bw iops p50 p99 note=${5:-}
  read -r bw iops p50 p99 <<<"$3"
  if [ "$bw" = fail ]; then record "$c" "$m" unsupported "" "fio failed${note:+; $note}"; return; fi
  if [ "$4" = bw ]; then record "$c" "$m" "$bw" MiB/s "$note"
  else record "$c" "$m" "$iops" IOPS "p50 ${p50} us; p99 ${p99} us${note:+; $note}"; fi
}

read_workloads() {
  local c=$1 runs=() r res j
  PEAK=0 CPU=0
  for ((r = 1; r <= SEQ_RUNS; r++)); do
    c_cold "$c" || return 1
    rss_start "$C_PID"
    res=$(fio_seq "$c-seqcold-$r" "$C_ROOT" 1); runs+=("${res%% *}")
    peak "$(rss_stop)"
  done
  record "$c" seq_cold_1j "$(printf '%s ' "${runs[@]}" | median)" MiB/s "median of ${#runs[@]} fresh mounts: ${runs[*]}"
  rss_start "$C_PID"
  for j in $JOBS; do rec_fio "$c" "seq_warm_${j}j" "$(fio_seq "$c-seqwarm-$j" "$C_ROOT" "$j")" bw; done
  for j in $JOBS; do rec_fio "$c" "rand_warm_${j}j" "$(fio_rand "$c-randwarm-$j" "$C_ROOT" "$j" "$RAND_S")" iops \
    "after a full sequential read; ${RAND_S} s"; done
  peak "$(rss_stop)"
  for j in $JOBS; do
    if [ "$j" != 1 ]; then
      c_cold "$c" || return 1; rss_start "$C_PID"
      rec_fio "$c" "seq_cold_${j}j" "$(fio_seq "$c-seqcold-${j}j" "$C_ROOT" "$j")" bw "fresh mount"
      peak "$(rss_stop)"
    fi
    c_cold "$c" || return 1; rss_start "$C_PID"
    rec_fio "$c" "rand_cold_${j}j" "$(fio_rand "$c-randcold-$j" "$C_ROOT" "$j" "$RAND_S")" iops "fresh mount; ${RAND_S} s"
    peak "$(rss_stop)"
  done
  record "$c" rss_read "$PEAK" MiB "peak over all read jobs"
  record "$c" cpu_read "$CPU" s "client CPU (user+sys) over all read jobs"
}

# wait_durable CONTENDER METRIC T0 s3.py-wait-args...: poll the unproxied port.
wait_durable() {
  local c=$1 m=$2 t0=$3 out; shift 3
  if out=$(python3 "$LIB/s3.py" "$@"); then record "$c" "$m" "$(elapsed "$t0" "$out")" s
  else record "$c" "$m" timeout s "not in the bucket after ${*: -1} s: $out"; fi
}

# rec_timed CONTENDER METRIC WHAT: record a timed_cmd result (seconds, timeout or unsupported).
rec_timed() {
  if [ "$T_RC" = 124 ]; then record "$1" "$2" timeout s "$3 did not finish in $(elapsed "$T_START" "$T_END") s"
  elif [ "$T_RC" != 0 ]; then record "$1" "$2" unsupported "" "$3 failed (exit $T_RC)"
  else record "$1" "$2" "$(elapsed "$T_START" "$T_END")" s; fi
}

write_workloads() {
  local c=$1
  c_cold "$c" || return 1
  rss_start "$C_PID"
  mkdir -p "$C_ROOT/w"
  timed_cmd 300 dd if="$W/data/256m.bin" of="$C_ROOT/w/$c-256m.bin" bs=1M status=none
  rec_timed "$c" write256_return dd
  [ "$T_RC" = 0 ] && wait_durable "$c" write256_durable "$T_START" wait-size "$BUCKET" "w/$c-256m.bin" 268435456 300
  mkdir -p "$C_ROOT/small-$c"
  timed_cmd "$SMALL_TIMEOUT" cp "$W"/data/small1000/* "$C_ROOT/small-$c/"
  rec_timed "$c" small1k_return "cp of 1000 x 4 KiB"
  if [ "$T_RC" = 0 ]; then wait_durable "$c" small1k_listed "$T_START" wait-count "$BUCKET" "small-$c/s" 1000 300
  else record "$c" small1k_listed timeout s "cp did not finish: $(python3 "$LIB/s3.py" count "$BUCKET" "small-$c/") of 1000 listed"; fi
  PEAK=0 CPU=0; peak "$(rss_stop)"
  record "$c" rss_small "$PEAK" MiB "dd + cp + wait for the bucket"
  record "$c" cpu_write "$CPU" s "client CPU (user+sys): dd + cp + wait for the bucket"
}

# small10k: create 10,000 x 4 KiB with one cp, wait until all are listed, ls -l
# them (same mount), then read them all back on a fresh mount (8 parallel cats).
small10k_workloads() {
  local c=$1 n
  c_cold "$c" || return 1
  rss_start "$C_PID"
  timed_cmd "$SMALL_TIMEOUT" cp -r "$W/data/small10k" "$C_ROOT/s10k-$c"
  rec_timed "$c" small10k_return "cp of 10000 x 4 KiB"
  if [ "$T_RC" != 0 ]; then
    record "$c" small10k_listed timeout s "create did not finish: $(python3 "$LIB/s3.py" count "$BUCKET" "s10k-$c/") of 10000 listed"
    peak "$(rss_stop)"; return 0
  fi
  wait_durable "$c" small10k_listed "$T_START" wait-count "$BUCKET" "s10k-$c/t" 10000 600
  timed_cmd 300 bash -c "ls -l '$C_ROOT/s10k-$c' | wc -l >'$W/lscount'"
  rec_timed "$c" small10k_list "ls -l"
  c_cold "$c" || return 1
  timed_cmd "$SMALL_TIMEOUT" bash -c "cd '$C_ROOT/s10k-$c' && ls | xargs -P 8 -n 100 cat | wc -c >'$W/bytes'"
  n=$(cat "$W/bytes" 2>/dev/null || echo 0)
  rec_timed "$c" small10k_readback "read back (xargs -P 8 cat)"
  [ "$n" = 40960000 ] || log "  $c read back $n bytes, expected 40960000"
  record "$c" rss_small10k "$(rss_stop | cut -d' ' -f1)" MiB "create + list + read back (last mount)"
}

# meta: ls -l of 10,000 keys on a fresh mount; stat of the 10,000 names (no
# listing first) on another fresh mount, one at a time, for at most STAT_S seconds.
meta_workloads() {
  local c=$1 out
  c_cold "$c" || return 1
  timed_cmd 600 bash -c "ls -l '$C_ROOT/many' | wc -l >'$W/lscount'"
  rec_timed "$c" ls10k_cold "ls -l"
  [ "$(cat "$W/lscount")" = 10001 ] || log "  $c: ls -l printed $(cat "$W/lscount") lines (expected 10001)"
  c_cold "$c" || return 1
  out=$(python3 - "$C_ROOT/many" "$STAT_S" <<'PY'
import os, sys, time
d, limit = sys.argv[1], float(sys.argv[2])
t0, n = time.time(), 0
for i in range(10000):
    os.stat("%s/f%05d.txt" % (d, i))
    n += 1
    if time.time() - t0 > limit:
        break
print("%.1f %d" % (n / (time.time() - t0), n))
PY
  ) || { record "$c" stat10k unsupported "" "stat failed"; return 0; }
  record "$c" stat10k "${out% *}" files/s "${out#* } of 10000 stats on a fresh mount (cap ${STAT_S} s)"
}
