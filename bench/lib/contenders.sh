# Mount/unmount of every FUSE contender, each with the options of
# ../shared/reference/peer-bench.md (those its documentation recommends for
# throughput), all on the proxied endpoint $BENCH_S3. Every daemon runs in the
# foreground under our control (its pid is ours), so RSS sampling and cleanup
# never look processes up by name.
#   c_mount NAME   fresh mount at $W/mnt/NAME, cache $W/cache/NAME; sets C_PID, C_ROOT
#   c_umount NAME  unmount and wait for the daemon to exit
#   c_cold NAME    c_umount, empty the cache dir, drop_caches, c_mount
#   c_cmd NAME     print the mount command (recorded in the report)

# ferry-nopt is ferry with FUSE passthrough off (--passthrough off): reads
# of wholly cached files go through ferry as before passthrough.
# ferry-nocold is ferry with cold passthrough off (--cold-passthrough off):
# only wholly cached files pass through, the others are read through ferry.
# ferry's own mount (fio, ls, the shared-mount tasks: processes it did not
# start) takes --cold-passthrough unguarded: the path every read-only open
# of a ferry run task takes by default, where ferry also guards mappings
# (fio and the tasks map no files). The task workload's ferry run per task
# uses the defaults.
FUSE_CONTENDERS=(ferry ferry-nocold ferry-nopt s3fs rclone mount-s3 mount-s3-cache goofys geesefs)

c_bin() { case $1 in ferry*) echo "$FERRY" ;; mount-s3*) echo mount-s3 ;; *) echo "$1" ;; esac; }
c_available() { command -v "$(c_bin "$1")" >/dev/null 2>&1; }
c_version() {
  case $1 in
    ferry) "$FERRY" version | head -1 ;;
    ferry-nopt) echo "$("$FERRY" version | head -1), --passthrough off" ;;
    ferry-nocold) echo "$("$FERRY" version | head -1), --cold-passthrough off" ;;
    s3fs) s3fs --version 2>&1 | head -1 | sed 's/ with .*//' ;;
    rclone) rclone version | head -1 ;;
    *) "$(c_bin "$1")" --version 2>&1 | head -1 ;;
  esac
}

# c_cmd NAME: the mount command as an argv, one word per line (M, D, L placeholders).
c_cmd() {
  local M=$W/mnt/$1 D=$W/cache/$1 L=$W/logs/$1-mount.log
  case $1 in
    ferry) printf '%s\n' "$FERRY" mount --cold-passthrough unguarded --cache-dir "$D" --metrics-addr "127.0.0.1:$FERRY_METRICS_PORT" \
      --log-file "$L" --log-level "${FERRY_LOG_LEVEL:-info}" "$M" ;;
    ferry-nopt) printf '%s\n' "$FERRY" mount --passthrough off --cache-dir "$D" --metrics-addr "127.0.0.1:$FERRY_METRICS_PORT" \
      --log-file "$L" --log-level "${FERRY_LOG_LEVEL:-info}" "$M" ;;
    ferry-nocold) printf '%s\n' "$FERRY" mount --cold-passthrough off --cache-dir "$D" --metrics-addr "127.0.0.1:$FERRY_METRICS_PORT" \
      --log-file "$L" --log-level "${FERRY_LOG_LEVEL:-info}" "$M" ;;
    s3fs) printf '%s\n' s3fs "$BUCKET" "$M" -f -o "url=$BENCH_S3,use_path_request_style,endpoint=us-east-1,passwd_file=$W/s3fs.passwd,use_cache=$D,del_cache,parallel_count=16,multipart_size=16,multireq_max=32,max_stat_cache_size=100000,logfile=$L" ;;
    rclone) printf '%s\n' rclone mount "s3env:$BUCKET" "$M" --vfs-cache-mode full --cache-dir "$D" \
      --vfs-read-ahead 128M --use-server-modtime --transfers 16 --s3-upload-concurrency 16 \
      --s3-chunk-size 16M --log-file "$L" ;;
    mount-s3) printf '%s\n' mount-s3 "$BUCKET" "$M" --endpoint-url "$BENCH_S3" --force-path-style \
      --region us-east-1 --allow-delete --allow-overwrite -f -l "$W/logs" ;;
    mount-s3-cache) printf '%s\n' mount-s3 "$BUCKET" "$M" --endpoint-url "$BENCH_S3" --force-path-style \
      --region us-east-1 --allow-delete --allow-overwrite --cache "$D" -f -l "$W/logs" ;;
    goofys) printf '%s\n' goofys -f --endpoint "$BENCH_S3" --region us-east-1 "$BUCKET" "$M" ;;
    geesefs) printf '%s\n' geesefs -f --endpoint "$BENCH_S3" --region us-east-1 --log-file "$L" "$BUCKET" "$M" ;;
  esac
}

c_mount() {
  local name=$1 M=$W/mnt/$1 i argv
  mkdir -p "$M" "$W/cache/$name"
  mapfile -t argv < <(c_cmd "$name")
  case $name in
    ferry*) AWS_S3_ENDPOINT=$BENCH_S3 bg "$name" "${argv[@]}"; C_ROOT=$M/s3/$BUCKET ;;
    s3fs) printf '%s:%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$W/s3fs.passwd"
      chmod 600 "$W/s3fs.passwd"; bg "$name" "${argv[@]}"; C_ROOT=$M ;;
    rclone) RCLONE_CONFIG_S3ENV_TYPE=s3 RCLONE_CONFIG_S3ENV_PROVIDER=Minio RCLONE_CONFIG_S3ENV_ENDPOINT=$BENCH_S3 \
      RCLONE_CONFIG_S3ENV_REGION=us-east-1 RCLONE_CONFIG_S3ENV_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
      RCLONE_CONFIG_S3ENV_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY bg "$name" "${argv[@]}"; C_ROOT=$M ;;
    *) bg "$name" "${argv[@]}"; C_ROOT=$M ;;
  esac
  C_PID=$BG_PID
  echo "$M" >>"$W/mounts"
  for ((i = 0; i < 300; i++)); do
    mountpoint -q "$M" && stat "$C_ROOT" >/dev/null 2>&1 && return 0
    kill -0 "$C_PID" 2>/dev/null || break
    sleep 0.1
  done
  log "$name did not mount: $(tail -3 "$W/logs/$name.log" | tr '\n' ' ')"
  c_umount "$name"
  return 1
}

c_umount() {
  local name=$1 M=$W/mnt/$1
  [ -n "${C_PID:-}" ] || return 0
  if [[ $name == ferry* ]]; then
    stop_pid "$C_PID" 600             # SIGTERM: ferry drains, then unmounts
  else
    unmount "$M"
    wait_gone "$C_PID" 120 || stop_pid "$C_PID" 10
  fi
  wait "$C_PID" 2>/dev/null || true
  unmount "$M"
  C_PID=
}

c_cold() {
  c_umount "$1"
  rm -rf "${W:?}/cache/$1"
  drop_caches
  c_mount "$1"
}
