# Baselines measured in the same run as the FUSE contenders:
#   copy  : the copy-in/copy-out approach with the aws CLI through the same proxy:
#           parallel ranged GETs / multipart uploads (AWS_CONFIG_FILE sets 16
#           concurrent requests of 16 MiB, like the FUSE clients' options). For it
#           "durable"/"listed" is when the command returns. Random reads, warm
#           reads and stat do not apply (n/a).
#   local : the same fio/dd/cp/ls/stat on the local disk ($W, under /tmp);
#           "durable" = after sync.
#   getfloor: bench/getfloor, parallel ranged GETs of the fio object into
#           /dev/null (GETFLOOR_C in flight, GETFLOOR_PART bytes each, as
#           ferry's readahead), through the same proxy: the cold-read floor
#           of a client without FUSE, cache or checksums, and its CPU per GiB.
#           With ferry among the contenders its runs alternate with ferry's
#           cold sequential runs (GETFLOOR_PAIRED), so that a drift of the
#           machine's speed between them does not land in the ratio.

# aws_timed CMD...: run a command (aws CLI) in the background with a timeout,
# sample its RSS/CPU (meas_*); sets T_START/T_END/T_RC. aws_proxy as the first
# word stands for the aws CLI through the proxy (timeout runs no functions),
# aws_proxy_ls for it without --only-show-errors; the output goes to logs/copy.log.
aws_timed() {
  case $1 in
    aws_proxy) set -- aws --endpoint-url "$BENCH_S3" --only-show-errors "${@:2}" ;;
    aws_proxy_ls) set -- aws --endpoint-url "$BENCH_S3" "${@:2}" ;;  # s3 ls has no --only-show-errors
  esac
  local pid
  T_START=$(now); T_RC=0
  timeout "${AWS_TIMEOUT:-600}" "$@" >>"$W/logs/copy.log" 2>&1 & pid=$!
  meas_start "$pid" --tree
  wait "$pid" || T_RC=$?
  T_END=$(now)
  meas_stop
}

COPY_NA="n/a: not a file system (download / run / upload)"

bench_copy() {
  local runs=() r pb pat bs j
  phase_reset
  for ((r = 1; r <= SEQ_RUNS; r++)); do
    drop_caches
    aws_timed aws_proxy s3 cp "s3://$BUCKET/big/big.bin" /dev/null
    [ "$T_RC" = 0 ] || { record copy read_seq_1m_cold_1j unsupported "" "aws s3 cp failed (exit $T_RC)"; break; }
    runs+=("$(awk -v s="$(elapsed "$T_START" "$T_END")" -v m="$BIG_MB" 'BEGIN{printf "%.1f", m/s}')")
  done
  [ "$T_RC" = 0 ] && record copy read_seq_1m_cold_1j "$(printf '%s ' "${runs[@]}" | median)" MiB/s \
    "aws s3 cp of the object to /dev/null; median of ${#runs[@]}: ${runs[*]}"
  phase_record copy read "aws CLI process tree"
  for pb in $PATTERNS; do
    pat=${pb%:*} bs=${pb#*:}
    for j in $JOBS; do
      [ "$pat:$bs:$j" = seq:1m:1 ] || record copy "read_${pat}_${bs}_cold_${j}j" n/a "" "$COPY_NA"
      record copy "read_${pat}_${bs}_warm_${j}j" n/a "" "$COPY_NA"
    done
  done
  phase_reset
  aws_timed aws_proxy s3 cp "$W/data/write.bin" "s3://$BUCKET/w/copy-1m.bin"
  for bs in 1m 4m; do
    rec_timed copy "write_${bs}_return" "aws s3 cp (upload; block size does not apply)"
    rec_timed copy "write_${bs}_durable" "aws s3 cp (upload)"
  done
  phase_record copy write "aws CLI process tree"
  phase_reset
  aws_timed aws_proxy s3 cp --recursive "$W/data/small/" "s3://$BUCKET/small-copy/"
  rec_timed copy small_return "aws s3 cp --recursive"; rec_timed copy small_listed "aws s3 cp --recursive"
  aws_timed aws_proxy_ls s3 ls "s3://$BUCKET/small-copy/"
  rec_timed copy small_list "aws s3 ls"
  aws_timed aws_proxy s3 cp --recursive "s3://$BUCKET/small-copy/" "$W/copyback/"
  rec_timed copy small_readback "aws s3 cp --recursive (download)"
  rm -rf "$W/copyback"
  phase_record copy small "aws CLI process tree"
  if [ "${SCAN_N:-0}" -gt 0 ]; then
    phase_reset
    drop_caches
    aws_timed bash -c "aws --endpoint-url '$BENCH_S3' --only-show-errors s3 cp --recursive 's3://$BUCKET/scan/' '$W/scancopy/' && find '$W/scancopy' -type f -exec cat {} + >/dev/null"
    rec_timed copy scan_read "aws s3 cp --recursive, then find -exec cat on the local disk"
    aws_timed bash -c "aws --endpoint-url '$BENCH_S3' --only-show-errors s3 cp --recursive 's3://$BUCKET/zarr/' '$W/zarrcopy/' && python3 '$LIB/zarrread.py' '$W/zarrcopy' >/dev/null"
    rec_timed copy zarr_read "aws s3 cp --recursive, then the Zarr-shaped read on the local disk"
    rm -rf "$W/scancopy" "$W/zarrcopy"
    phase_record copy scan "aws CLI process tree"
  fi
  if [ "${TREE_N:-0}" -gt 0 ]; then
    phase_reset
    aws_timed aws_proxy_ls s3 ls --recursive "s3://$BUCKET/tree/"
    rec_timed copy meta_lsr "aws s3 ls --recursive"
    record copy meta_stat n/a "" "$COPY_NA"
    phase_record copy meta "aws CLI process tree"
  fi
  env_clean copy
}

bench_local() {
  local d=$W/data r runs=() j L=$W/localdir pb pat bs out R=$W/localroot
  for ((r = 1; r <= SEQ_RUNS; r++)); do
    drop_caches
    runs+=("$(fio_read "local-seq-1m-cold-1-$r" "$R" seq 1m 1 | cut -d' ' -f1)")
  done
  record local read_seq_1m_cold_1j "$(printf '%s ' "${runs[@]}" | median)" MiB/s "median of ${#runs[@]}: ${runs[*]}"
  for pb in $PATTERNS; do
    pat=${pb%:*} bs=${pb#*:}
    for j in $JOBS; do
      if [ "$pat:$bs:$j" != seq:1m:1 ]; then
        drop_caches
        rec_fio local "read_${pat}_${bs}_cold_${j}j" "$(fio_read "local-$pat-$bs-cold-$j" "$R" "$pat" "$bs" "$j")" "$bs" "after drop_caches"
      fi
      rec_fio local "read_${pat}_${bs}_warm_${j}j" "$(fio_read "local-$pat-$bs-warm-$j" "$R" "$pat" "$bs" "$j")" "$bs" \
        "fio invalidate=1: reads the disk"
    done
  done
  mkdir -p "$L"
  for bs in 1m 4m; do
    timed_cmd 300 dd if="$d/write.bin" of="$L/$bs.bin" bs="${bs^^}" status=none
    rec_timed local "write_${bs}_return" dd
    sync; record local "write_${bs}_durable" "$(elapsed "$T_START" "$(now)")" s "after sync"
    rm -f "$L/$bs.bin"
  done
  timed_cmd 300 cp -r "$d/small" "$L/small"
  rec_timed local small_return "cp -r"
  sync; record local small_listed "$(elapsed "$T_START" "$(now)")" s "after sync"
  timed_cmd 300 bash -c "ls -l '$L/small' | wc -l >/dev/null"; rec_timed local small_list "ls -l"
  drop_caches
  timed_cmd 300 bash -c "cd '$L/small' && ls | xargs -P 8 -n 100 cat | wc -c >/dev/null"
  rec_timed local small_readback "xargs -P 8 cat after drop_caches"
  if [ "${TREE_N:-0}" -gt 0 ]; then
    python3 - "$L/tree" "$TREE_N" "$TREE_PER_DIR" <<'PY'
import os, sys
d, n, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
blob = os.urandom(100)
for i in range(n):
    p = "%s/d%03d" % (d, i // per)
    if i % per == 0:
        os.makedirs(p, exist_ok=True)
    open("%s/f%06d.txt" % (p, i), "wb").write(blob)
PY
    drop_caches
    timed_cmd 300 bash -c "ls -lR '$L/tree' | grep -c '^-' >/dev/null"; rec_timed local meta_lsr "ls -lR after drop_caches"
    drop_caches
    out=$(python3 -c "
import os, time
t0 = time.time()
for i in range($SMALL_N): os.stat('$L/small/t%05d.txt' % i)
print('%.1f' % ($SMALL_N / (time.time() - t0)))")
    record local meta_stat "$out" files/s "after drop_caches"
  fi
  rm -rf "$L"
}

GETFLOOR_C=${GETFLOOR_C:-16} GETFLOOR_PART=${GETFLOOR_PART:-8388608}

# getfloor_build, getfloor_once (one run after drop_caches, appended to
# GF_RUNS and GF_CPUS) and getfloor_record NOTE: the getfloor's pieces, for
# its own run (bench_getfloor) or paired with ferry's cold runs
# (read_workloads, GETFLOOR_PAIRED=1).
GF_RUNS=() GF_CPUS=()
# getfloor_opts [SUFFIX]: its line in the contender table.
getfloor_opts() {
  printf 'getfloor\tbench/getfloor\tparallel ranged GETs of the object into /dev/null with the AWS SDK (%s in flight, %s MiB each): the cold-read floor without FUSE or cache%s\n' \
    "$GETFLOOR_C" "$((GETFLOOR_PART >> 20))" "${1:-}" >>"$OPTS"
}
getfloor_build() {
  (cd "$ROOT" && go build -o "$W/getfloor" ./bench/getfloor) || { record getfloor read_seq_1m_cold_1j unsupported "" "build failed"; return 1; }
}
getfloor_once() {
  local out
  drop_caches
  out=$("$W/getfloor" "$BENCH_S3" "$BUCKET" big/big.bin "$GETFLOOR_C" "$GETFLOOR_PART") || { log "  getfloor failed"; return 1; }
  GF_RUNS+=("${out%% MiB/s*}")
  GF_CPUS+=("$(awk '{print $6}' <<<"$out")")
}
getfloor_record() {
  [ ${#GF_RUNS[@]} -gt 0 ] || { record getfloor read_seq_1m_cold_1j unsupported "" "getfloor failed"; return; }
  record getfloor read_seq_1m_cold_1j "$(printf '%s ' "${GF_RUNS[@]}" | median)" MiB/s "median of ${#GF_RUNS[@]}$1: ${GF_RUNS[*]}"
  record getfloor cpu_per_gib_cold "$(printf '%s ' "${GF_CPUS[@]}" | median)" s/GiB "its own user+sys CPU per GiB; median of ${#GF_CPUS[@]}: ${GF_CPUS[*]}"
}

bench_getfloor() {
  local r
  getfloor_build || return
  for ((r = 1; r <= SEQ_RUNS; r++)); do getfloor_once || break; done
  getfloor_record ""
}
