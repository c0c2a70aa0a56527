# Workloads run against one FUSE contender. "Cold" always means c_cold: unmount,
# wait for the daemon to exit, empty its cache dir, drop_caches, mount again.
# "Warm" means after one full read of the object on the same mount; fio keeps
# its default invalidate=1, so warm shows the client's own cache, not the page
# cache. Every fio run is capped at FIO_RT seconds. Metric names are listed in
# lib/report.py. The functions also serve the local baseline (ROOT = a local dir).

# fio_read LABEL ROOT PATTERN(seq|rand) BS(4k|1m) JOBS: reads of big/big.bin.
# seq: JOBS jobs split the object (each reads its 1/JOBS share, stops at FIO_RT s);
# rand: JOBS jobs read at random offsets over the whole object for FIO_RT s.
fio_read() {
  local label=$1 root=$2 pat=$3 bs=$4 n=$5 part=$((BIG_MB / $5))
  if [ "$pat" = seq ]; then
    fio_run "$label" --name=seq --filename="$root/big/big.bin" --rw=read --bs="$bs" --readonly \
      --numjobs="$n" --size="${part}m" --offset_increment="${part}m" --runtime="$FIO_RT"
  else
    fio_run "$label" --name=rand --filename="$root/big/big.bin" --rw=randread --bs="$bs" --readonly \
      --numjobs="$n" --size="${BIG_MB}m" --runtime="$FIO_RT" --time_based
  fi
}

# rec_fio CONTENDER METRIC "MiB/s IOPS p50 p99" BS [NOTE]: 1m -> MiB/s, 4k -> IOPS.
rec_fio() {
  local c=$1 m=$2 bw iops p50 p99 note=${5:-}
  read -r bw iops p50 p99 <<<"$3"
  if [ "$bw" = fail ]; then record "$c" "$m" unsupported "" "fio failed${note:+; $note}"; return; fi
  note="p50 ${p50} us; p99 ${p99} us${note:+; $note}"
  if [ "$4" = 1m ]; then record "$c" "$m" "$bw" MiB/s "$note; $iops IOPS"
  else record "$c" "$m" "$iops" IOPS "$note; $bw MiB/s"; fi
}

read_workloads() {
  local c=$1 runs=() cpus=() mcpus=() m0 r res j pb pat bs pair
  phase_reset
  # cold: a fresh mount per run; seq 1 MiB 1 job is the median of SEQ_RUNS mounts.
  for pb in $PATTERNS; do
    pat=${pb%:*} bs=${pb#*:}
    for j in $JOBS; do
      if [ "$pat:$bs:$j" = seq:1m:1 ]; then
        runs=() cpus=() mcpus=() pair=0
        # paired: the getfloor runs just before each of ferry's, so that
        # both see the same machine (its speed drifts by +/-15 % within
        # minutes on these VMs)
        if [ "$c" = ferry ] && [ "${GETFLOOR_PAIRED:-0}" = 1 ]; then pair=1; fi
        for ((r = 1; r <= SEQ_RUNS; r++)); do
          if [ "$pair" = 1 ]; then getfloor_once || true; fi # a failure is logged; the row says so
          c_cold "$c" || return 1
          meas_start "$C_PID" --tree
          m0=$(minio_cpu)
          res=$(fio_read "$c-seq-1m-cold-1-$r" "$C_ROOT" seq 1m 1); runs+=("${res%% *}")
          mcpus+=("$(awk -v a="$m0" -v b="$(minio_cpu)" 'BEGIN{printf "%.2f", b - a}')")
          meas_stop
          # CPU per GiB of this run (the daemon's; fio reads the whole object)
          cpus+=("$(awk -v c="${RSS_RESULT#* }" -v m="$BIG_MB" 'BEGIN{printf "%.3f", c / (m / 1024)}')")
        done
        record "$c" read_seq_1m_cold_1j "$(printf '%s ' "${runs[@]}" | median)" MiB/s \
          "median of ${#runs[@]} fresh mounts: ${runs[*]}; MinIO CPU-s during each: ${mcpus[*]}"
        record "$c" cpu_per_gib_cold "$(printf '%s ' "${cpus[@]}" | median)" s/GiB \
          "the daemon's user+sys CPU per GiB of the cold sequential 1 MiB read (1 job); median of ${#cpus[@]}: ${cpus[*]}"
        if [ "$pair" = 1 ]; then getfloor_record ", each run just before one of ferry's (alternating, in ferry's run)"; fi
        continue
      fi
      c_cold "$c" || return 1
      meas_start "$C_PID" --tree
      rec_fio "$c" "read_${pat}_${bs}_cold_${j}j" "$(fio_read "$c-$pat-$bs-cold-$j" "$C_ROOT" "$pat" "$bs" "$j")" "$bs" "fresh mount"
      meas_stop
    done
  done
  # warm: one full read first (same mount), then every pattern.
  meas_start "$C_PID" --tree
  timed_cmd 600 cat "$C_ROOT/big/big.bin" >/dev/null
  [ "$T_RC" = 0 ] || log "  $c: priming read failed (exit $T_RC)"
  for pb in $PATTERNS; do
    pat=${pb%:*} bs=${pb#*:}
    for j in $JOBS; do
      rec_fio "$c" "read_${pat}_${bs}_warm_${j}j" "$(fio_read "$c-$pat-$bs-warm-$j" "$C_ROOT" "$pat" "$bs" "$j")" "$bs" \
        "after a full read on the same mount"
    done
  done
  meas_stop
  phase_record "$c" read "all read jobs"
}

# wait_durable CONTENDER METRIC T0 s3.py-wait-args...: poll the unproxied port.
wait_durable() {
  local c=$1 m=$2 t0=$3 out; shift 3
  if out=$(python3 "$LIB/s3.py" "$@"); then record "$c" "$m" "$(elapsed "$t0" "$out")" s
  else record "$c" "$m" timeout s "not in the bucket after $(elapsed "$t0" "$(now)") s: $out"; fi
}

# rec_timed CONTENDER METRIC WHAT: record a timed_cmd result (seconds, timeout or unsupported).
rec_timed() {
  if [ "$T_RC" = 124 ]; then record "$1" "$2" timeout s "$3 did not finish in $(elapsed "$T_START" "$T_END") s"
  elif [ "$T_RC" != 0 ]; then record "$1" "$2" unsupported "" "$3 failed (exit $T_RC)"
  else record "$1" "$2" "$(elapsed "$T_START" "$T_END")" s; fi
}

# write: dd of WRITE_MB MiB with 1 MiB and 4 MiB blocks; return and durable.
write_workloads() {
  local c=$1 bs size=$((WRITE_MB * 1048576))
  phase_reset
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  mkdir -p "$C_ROOT/w"
  for bs in 1m 4m; do
    timed_cmd 300 dd if="$W/data/write.bin" of="$C_ROOT/w/$c-$bs.bin" bs="${bs^^}" status=none
    rec_timed "$c" "write_${bs}_return" dd
    if [ "$T_RC" = 0 ]; then wait_durable "$c" "write_${bs}_durable" "$T_START" wait-size "$BUCKET" "w/$c-$bs.bin" "$size" 300
    else record "$c" "write_${bs}_durable" timeout s "dd did not finish"; fi
  done
  meas_stop
  phase_record "$c" write "dd 1m + dd 4m + wait for the bucket"
}

# small files: cp -r of SMALL_N x 4 KiB (create/write/close), wait until all are
# listed; ls -l of them (same mount); read them back on a fresh mount (8 parallel
# cats). If the create did not finish in SMALL_CAP s, list and read back the
# seeded smallseed/ instead (noted).
small_workloads() {
  local c=$1 n dir=small-$1 note=
  phase_reset
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  timed_cmd "$SMALL_CAP" cp -r "$W/data/small" "$C_ROOT/$dir"
  rec_timed "$c" small_return "cp -r of $SMALL_N x 4 KiB"
  if [ "$T_RC" = 0 ]; then
    wait_durable "$c" small_listed "$T_START" wait-count "$BUCKET" "$dir/t" "$SMALL_N" 600
  else
    record "$c" small_listed timeout s "create did not finish in $(elapsed "$T_START" "$T_END") s: $(python3 "$LIB/s3.py" count "$BUCKET" "$dir/") of $SMALL_N listed"
    dir=smallseed note="the seeded smallseed/ ($c did not finish creating its own)"
  fi
  timed_cmd "$LIST_CAP" bash -c "ls -l '$C_ROOT/$dir' | wc -l >'$W/lscount'"
  rec_timed "$c" small_list "ls -l${note:+ of $note}"
  [ "$T_RC" != 0 ] || [ "$(cat "$W/lscount")" = $((SMALL_N + 1)) ] || log "  $c: ls -l printed $(cat "$W/lscount") lines"
  meas_stop
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  timed_cmd "$SMALL_CAP" bash -c "cd '$C_ROOT/$dir' && ls | xargs -P 8 -n 100 cat | wc -c >'$W/bytes'"
  rec_timed "$c" small_readback "fresh mount; xargs -P 8 cat${note:+; $note}"
  n=$(cat "$W/bytes" 2>/dev/null || echo 0)
  [ "$T_RC" != 0 ] || [ "$n" = $((SMALL_N * 4096)) ] || log "  $c read back $n bytes, expected $((SMALL_N * 4096))"
  meas_stop
  phase_record "$c" small "create + list + read back"
}

# small-object scans: find -exec cat {} + of scan/ (SCAN_N x 1 KiB,
# SCAN_PER_DIR per directory, in find order) on a fresh mount; then on
# another fresh mount a Zarr-shaped read (lib/zarrread.py: the chunk files
# of zarr/, named from .zarray without a listing, opened in key order and
# read whole). Each capped at SCAN_CAP s.
scan_workloads() {
  local c=$1 n want=$((ZARR_ROWS * ZARR_COLS * ZARR_SIZE))
  phase_reset
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  timed_cmd "$SCAN_CAP" bash -c "find '$C_ROOT/scan' -type f -exec cat {} + | wc -c >'$W/bytes'"
  rec_timed "$c" scan_read "fresh mount; find -exec cat {} + of $SCAN_N x 1 KiB"
  n=$(cat "$W/bytes" 2>/dev/null || echo 0)
  [ "$T_RC" != 0 ] || [ "$n" = $((SCAN_N * 1024)) ] || log "  $c: the scan read $n bytes, expected $((SCAN_N * 1024))"
  meas_stop
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  timed_cmd "$SCAN_CAP" bash -c "python3 '$LIB/zarrread.py' '$C_ROOT/zarr' >'$W/bytes'"
  rec_timed "$c" zarr_read "fresh mount; $((ZARR_ROWS * ZARR_COLS)) chunks of $((ZARR_SIZE >> 10)) KiB in key order"
  n=$(cat "$W/bytes" 2>/dev/null || echo 0)
  [ "$T_RC" != 0 ] || [ "$n" = "$want" ] || log "  $c: the Zarr read read $n bytes, expected $want"
  meas_stop
  phase_record "$c" scan "find -exec cat + Zarr-shaped read"
}

# metadata: ls -lR of tree/ (TREE_N keys) on a fresh mount; stat of the SMALL_N
# names of smallseed/ (no listing first) on another fresh mount, one at a time,
# for at most STAT_CAP seconds.
meta_workloads() {
  local c=$1 out
  phase_reset
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  timed_cmd "$LSR_CAP" bash -c "ls -lR '$C_ROOT/tree' | grep -c '^-' >'$W/lscount'"
  if [ "$T_RC" = 0 ] && [ "$(cat "$W/lscount")" != "$TREE_N" ]; then
    record "$c" meta_lsr unsupported "" "ls -lR listed $(cat "$W/lscount") of $TREE_N files"
  else rec_timed "$c" meta_lsr "ls -lR of $TREE_N keys"; fi
  meas_stop
  c_cold "$c" || return 1
  meas_start "$C_PID" --tree
  out=$(python3 - "$C_ROOT/smallseed" "$STAT_CAP" "$SMALL_N" <<'PY'
import os, sys, time
d, limit, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
t0, k = time.time(), 0
for i in range(n):
    os.stat("%s/t%05d.txt" % (d, i))
    k += 1
    if time.time() - t0 > limit:
        break
print("%.1f %d" % (k / (time.time() - t0), k))
PY
  ) || out=
  meas_stop
  if [ -n "$out" ]; then record "$c" meta_stat "${out% *}" files/s "${out#* } of $SMALL_N stats on a fresh mount (cap ${STAT_CAP} s)"
  else record "$c" meta_stat unsupported "" "stat failed"; fi
  phase_record "$c" meta "ls -lR + stat"
}
