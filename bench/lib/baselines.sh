# Baselines measured in the same run as the FUSE contenders:
#   copy  : the copy-in/copy-out approach with the aws CLI (default s3 settings:
#           10 concurrent requests, 8 MiB parts) through the same proxy. For it
#           "durable"/"listed" is when the command returns. Random reads, warm
#           reads and stat do not apply (n/a).
#   local : fio/dd/cp on the local disk ($W, under /tmp); "durable" = after sync.

# aws_timed CMD...: run a command (aws CLI) in the background with a timeout,
# sample its RSS; sets T_START/T_END/T_RC and AWS_RSS (MiB). aws_proxy as the
# first word stands for the aws CLI through the proxy (timeout runs no functions).
aws_timed() {
  [ "$1" = aws_proxy ] && set -- aws --endpoint-url "$BENCH_S3" --only-show-errors "${@:2}"
  local pid
  T_START=$(now); T_RC=0
  timeout "${AWS_TIMEOUT:-600}" "$@" >>"$W/logs/copy.log" 2>&1 & pid=$!
  rss_start "$pid"
  wait "$pid" || T_RC=$?
  T_END=$(now)
  AWS_RSS=$(rss_stop | cut -d' ' -f1)
}

bench_copy() {
  local runs=() r rss=0 na="n/a: not a file system (download / run / upload)"
  for ((r = 1; r <= SEQ_RUNS; r++)); do
    drop_caches
    aws_timed aws_proxy s3 cp "s3://$BUCKET/big/1g.bin" /dev/null
    [ "$T_RC" = 0 ] || { record copy seq_cold_1j unsupported "" "aws s3 cp failed (exit $T_RC)"; break; }
    runs+=("$(awk -v s="$(elapsed "$T_START" "$T_END")" -v m="$BIG_MB" 'BEGIN{printf "%.1f", m/s}')")
    [ "$AWS_RSS" -gt "$rss" ] && rss=$AWS_RSS
  done
  [ "$T_RC" = 0 ] && record copy seq_cold_1j "$(printf '%s ' "${runs[@]}" | median)" MiB/s "aws s3 cp to /dev/null; median of ${#runs[@]}: ${runs[*]}"
  record copy rss_read "$rss" MiB "aws CLI process tree"
  for j in $JOBS; do
    record copy "seq_warm_${j}j" n/a MiB/s "$na"
    record copy "rand_cold_${j}j" n/a IOPS "$na"; record copy "rand_warm_${j}j" n/a IOPS "$na"
    [ "$j" != 1 ] && record copy "seq_cold_${j}j" n/a MiB/s "$na"
  done
  aws_timed aws_proxy s3 cp "$W/data/256m.bin" "s3://$BUCKET/w/copy-256m.bin"
  rec_timed copy write256_return "aws s3 cp"; rec_timed copy write256_durable "aws s3 cp"
  rss=$AWS_RSS
  aws_timed aws_proxy s3 cp --recursive "$W/data/small1000/" "s3://$BUCKET/small-copy/"
  rec_timed copy small1k_return "aws s3 cp --recursive"; rec_timed copy small1k_listed "aws s3 cp --recursive"
  [ "$AWS_RSS" -gt "$rss" ] && rss=$AWS_RSS
  record copy rss_small "$rss" MiB "aws CLI process tree"
  [ "$BENCH_MODE" = full ] || return 0
  aws_timed aws_proxy s3 cp --recursive "$W/data/small10k/" "s3://$BUCKET/s10k-copy/"
  rec_timed copy small10k_return "aws s3 cp --recursive"; rec_timed copy small10k_listed "aws s3 cp --recursive"
  aws_timed bash -c "aws --endpoint-url $BENCH_S3 s3 ls s3://$BUCKET/s10k-copy/ | wc -l"
  rec_timed copy small10k_list "aws s3 ls"
  aws_timed aws_proxy s3 cp --recursive "s3://$BUCKET/s10k-copy/" "$W/copyback/"
  rec_timed copy small10k_readback "aws s3 cp --recursive (download)"
  rm -rf "$W/copyback"
  aws_timed bash -c "aws --endpoint-url $BENCH_S3 s3 ls s3://$BUCKET/many/ | wc -l"
  rec_timed copy ls10k_cold "aws s3 ls"
  record copy stat10k n/a files/s "$na"
}

bench_local() {
  local d=$W/data r runs=() j L=$W/localdir
  for ((r = 1; r <= SEQ_RUNS; r++)); do
    drop_caches
    runs+=("$(fio_seq "local-seqcold-$r" "$W/localroot" 1 | cut -d' ' -f1)")
  done
  record local seq_cold_1j "$(printf '%s ' "${runs[@]}" | median)" MiB/s "median of ${#runs[@]}: ${runs[*]}"
  for j in $JOBS; do
    rec_fio local "seq_warm_${j}j" "$(fio_seq "local-seqwarm-$j" "$W/localroot" "$j")" bw "fio invalidate=1: reads the disk"
    rec_fio local "rand_warm_${j}j" "$(fio_rand "local-randwarm-$j" "$W/localroot" "$j" "$RAND_S")" iops
    if [ "$j" != 1 ]; then drop_caches; rec_fio local "seq_cold_${j}j" "$(fio_seq "local-seqcold-${j}j" "$W/localroot" "$j")" bw; fi
    drop_caches
    rec_fio local "rand_cold_${j}j" "$(fio_rand "local-randcold-$j" "$W/localroot" "$j" "$RAND_S")" iops
  done
  mkdir -p "$L/small"
  timed_cmd 300 bash -c "dd if='$d/256m.bin' of='$L/256m.bin' bs=1M status=none"
  rec_timed local write256_return dd
  sync; record local write256_durable "$(elapsed "$T_START" "$(now)")" s "after sync"
  timed_cmd 300 bash -c "cp '$d'/small1000/* '$L/small/'"
  rec_timed local small1k_return cp
  sync; record local small1k_listed "$(elapsed "$T_START" "$(now)")" s "after sync"
  [ "$BENCH_MODE" = full ] || { rm -rf "$L"; return 0; }
  timed_cmd 300 cp -r "$d/small10k" "$L/s10k"
  rec_timed local small10k_return cp
  sync; record local small10k_listed "$(elapsed "$T_START" "$(now)")" s "after sync"
  timed_cmd 300 bash -c "ls -l '$L/s10k' | wc -l >/dev/null"; rec_timed local small10k_list "ls -l"
  drop_caches
  timed_cmd 300 bash -c "cd '$L/s10k' && ls | xargs -P 8 -n 100 cat | wc -c >/dev/null"
  rec_timed local small10k_readback "xargs -P 8 cat"
  drop_caches
  timed_cmd 300 bash -c "ls -l '$d/many' | wc -l >/dev/null"; rec_timed local ls10k_cold "ls -l"
  drop_caches
  local out; out=$(python3 -c "
import os, time
t0 = time.time()
for i in range(10000): os.stat('$d/many/f%05d.txt' % i)
print('%.1f' % (10000 / (time.time() - t0)))")
  record local stat10k "$out" files/s "after drop_caches"
  rm -rf "$L"
}
