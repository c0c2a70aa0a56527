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

# RSS/CPU sampler. rss_start PID starts a loop that samples PID's RSS (plus its
# descendants') every 0.5 s and keeps the maximum; rss_stop prints "peak_MiB cpu_s"
# (cpu_s = user+system CPU seconds PID and its reaped children used meanwhile).
tree_pids() { # PID -> PID and all its descendants, comma separated
  local all=$1 frontier=$1 next
  while [ -n "$frontier" ]; do
    next=$(ps -o pid= --ppid "$frontier" 2>/dev/null | tr -s ' \n' ',' | sed 's/^,//;s/,$//')
    [ -n "$next" ] && all="$all,$next"
    frontier=$next
  done
  echo "$all"
}
cpu_ticks() { awk '{print $14+$15+$16+$17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_start() {
  RSS_PID=$1 RSS_FILE=$(mktemp "$W/rss.XXXXXX") RSS_CPU0=$(cpu_ticks "$1")
  (
    peak=0
    while kill -0 "$RSS_PID" 2>/dev/null; do
      kb=$(ps -o rss= -p "$(tree_pids "$RSS_PID")" 2>/dev/null | awk '{s+=$1} END{print s+0}')
      [ "$kb" -gt "$peak" ] && peak=$kb && echo "$peak" >"$RSS_FILE"
      sleep 0.5
    done
  ) &
  RSS_LOOP=$!
}
rss_stop() {
  local cpu1 tck
  cpu1=$(cpu_ticks "$RSS_PID"); tck=$(getconf CLK_TCK)
  kill "$RSS_LOOP" 2>/dev/null; wait "$RSS_LOOP" 2>/dev/null || true
  awk -v kb="$(cat "$RSS_FILE" 2>/dev/null || echo 0)" -v c0="$RSS_CPU0" -v c1="$cpu1" -v t="$tck" \
    'BEGIN{printf "%.0f %.2f\n", (kb+0)/1024, (c1-c0)/t}'
  rm -f "$RSS_FILE"
}

# fio_run LABEL ARGS...: run fio with JSON output; prints "MiB/s IOPS p50_us p99_us".
fio_run() {
  local label=$1; shift
  local out="$W/logs/fio-$label.json"
  if ! timeout 600 fio --output-format=json --output="$out" --group_reporting "$@" >/dev/null 2>"$out.err"; then
    log "fio $label failed: $(tail -2 "$out.err" | tr '\n' ' ')"
    echo "fail fail fail fail"; return 0
  fi
  python3 - "$out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
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
