# Shared helpers for the benchmark harness (sourced by bench/run.sh).
# Everything the harness starts is recorded in $W/pids and every mount point in
# $W/mounts, so cleanup (trap on EXIT/INT/TERM) can undo it even after a failure.

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

now() { date +%s.%N; }                      # epoch seconds, float
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", b-a}'; }  # elapsed T0 T1

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# record CONTENDER METRIC VALUE UNIT [NOTE]: one CSV row (long format).
record() {
  local note=${5:-}
  note=${note//,/;}
  printf '%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" "$note" >>"$CSV"
  log "  $1 $2 = $3 $4 ${note:+($note)}"
}

# bg NAME CMD...: start CMD in the background (log in $W/logs/NAME.log), remember its pid.
# Sets BG_PID.
bg() {
  local name=$1; shift
  "$@" >"$W/logs/$name.log" 2>&1 &
  BG_PID=$!
  echo "$BG_PID" >>"$W/pids"
}

# stop_pid PID [SECONDS]: SIGTERM, wait up to SECONDS (default 60), then SIGKILL.
stop_pid() {
  local pid=$1 t=${2:-60} i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < t * 10; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  log "pid $pid did not stop in ${t}s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# wait_gone PID [SECONDS]: wait for a process to exit (a FUSE daemon after its unmount).
wait_gone() {
  local pid=$1 t=${2:-60} i
  for ((i = 0; i < t * 10; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

# unmount DIR: lazy-free FUSE unmount; falls back to umount -l.
unmount() {
  mountpoint -q "$1" 2>/dev/null || return 0
  fusermount3 -u "$1" 2>/dev/null || umount "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || log "drop_caches failed (not root?)"; }

# RSS/CPU sampler (lib/sampler.py). rss_start PIDS [--tree] samples the peak
# summed RSS of PIDS (comma separated; --tree: with their descendants) and their
# CPU seconds; rss_stop (not in a subshell: it waits for the sampler) sets
# RSS_RESULT="peak_MiB cpu_s". One sampler at a time.
rss_start() {
  RSS_FILE=$(mktemp "$W/rss.XXXXXX")
  python3 "$LIB/sampler.py" "$RSS_FILE" "$1" ${2:-} &
  RSS_LOOP=$!
}
rss_stop() {
  RSS_RESULT="0 0"
  [ -n "${RSS_LOOP:-}" ] || return 0
  kill -TERM "$RSS_LOOP" 2>/dev/null; wait "$RSS_LOOP" 2>/dev/null || true
  RSS_LOOP=
  [ -s "$RSS_FILE" ] && RSS_RESULT=$(cat "$RSS_FILE")
  rm -f "$RSS_FILE"
}

# Per-phase and per-contender totals: meas_start PIDS [--tree] / meas_stop
# accumulate the peak RSS into PEAK/TOT_PEAK and the CPU into CPU/TOT_CPU;
# phase_reset clears PEAK/CPU, phase_record CONTENDER PHASE WHAT records them.
PEAK=0 CPU=0 TOT_PEAK=0 TOT_CPU=0
meas_start() { rss_start "$@"; }
meas_stop() {
  local p c
  rss_stop; p=${RSS_RESULT%% *}; c=${RSS_RESULT#* }
  [ "$p" -gt "$PEAK" ] 2>/dev/null && PEAK=$p
  [ "$p" -gt "$TOT_PEAK" ] 2>/dev/null && TOT_PEAK=$p
  CPU=$(awk -v a="$CPU" -v b="$c" 'BEGIN{printf "%.2f", a+b}')
  TOT_CPU=$(awk -v a="$TOT_CPU" -v b="$c" 'BEGIN{printf "%.2f", a+b}')
}
phase_reset() { PEAK=0 CPU=0; }
phase_record() {
  record "$1" "rss_$2" "$PEAK" MiB "peak: $3"
  record "$1" "cpu_$2" "$CPU" s "user+sys: $3"
}

# fio_run LABEL ARGS...: run fio with JSON output; prints "MiB/s IOPS p50_us p99_us"
# of its reads (or writes if it did no reads), or "fail fail fail fail".
fio_run() {
  local label=$1; shift
  local out="$W/logs/fio-$label.json"
  if ! timeout "${FIO_TIMEOUT:-600}" fio --output-format=json --output="$out" --group_reporting "$@" >/dev/null 2>"$out.err"; then
    log "fio $label failed: $(tail -2 "$out.err" | tr '\n' ' ')"
    echo "fail fail fail fail"; return 0
  fi
  python3 - "$out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
j = j["read"] if j["read"]["io_bytes"] else j["write"]
p = j.get("clat_ns", {}).get("percentile", {})
print("%.1f %.0f %.0f %.0f" % (j["bw_bytes"] / 1048576, j["iops"],
      p.get("50.000000", 0) / 1000, p.get("99.000000", 0) / 1000))
PY
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# timed_cmd SECONDS CMD...: run CMD with a timeout; sets T_START, T_END, T_RC.
timed_cmd() {
  local t=$1; shift
  T_START=$(now); T_RC=0
  timeout "$t" "$@" || T_RC=$?
  T_END=$(now)
}
