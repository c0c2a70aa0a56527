#!/usr/bin/env bash
# Staged-input task workload: Nextflow-shaped tasks ("fusion bash
# <work>/.command.run", nxf_stage linking the inputs) that each read three
# inputs one after the other (256 MiB, 512 MiB, and a 1 GiB file whose 2 MiB
# index .bai is read first), compute on each after reading it, and write a
# 64 MiB output; cold cache, one ferry per task; with input staging off and
# on. Records the wall times (median of STAGE_REPS runs each, off and on
# alternating), their ratio and the staged bytes the tasks never read.
#   bench/stage.sh [quick|full]   on its own: MinIO + toxiproxy of lib/env.sh in a
#                                 scratch dir; results/<date>-stage-<mode>.{csv,log}
#   run.sh sources this file and calls stage_workload (its environment and CSV).
# Env: STAGE_REPS (default 1 quick, 3 full), STAGE_TASKS (concurrent tasks per
# run, default 1), STAGE_COMPUTE_X (SHA-256 passes over 1 MiB per MiB read,
# default 3: the compute then takes about as long as the cold reads on an idle
# 2-core machine; the gain of staging grows with it, up to 2x).

STAGE_MIB="256 512 1024"
STAGE_INDEX_KIB=2048
STAGE_OUT_MIB=64

# stage_seed: the inputs under stage/ (unproxied), the output source locally.
stage_seed() {
  local d=$W/data/stage m n=0 t0=$SECONDS
  mkdir -p "$d"
  for m in $STAGE_MIB; do
    n=$((n + 1))
    head -c "${m}M" /dev/urandom >"$d/in$n.bam"
    aws_direct s3 cp "$d/in$n.bam" "s3://$BUCKET/stage/in$n.bam"
    rm -f "$d/in$n.bam"
  done
  head -c "${STAGE_INDEX_KIB}K" /dev/urandom >"$d/in$n.bam.bai"
  aws_direct s3 cp "$d/in$n.bam.bai" "s3://$BUCKET/stage/in$n.bam.bai"
  head -c "${STAGE_OUT_MIB}M" /dev/urandom >"$d/out.bin"
  log "seeded stage/ ($STAGE_MIB MiB + a ${STAGE_INDEX_KIB} KiB index) in $((SECONDS - t0)) s"
}

# stage_scripts WORKDIR_KEY MOUNT: .command.run and .command.sh of one task.
stage_scripts() {
  local key=$1 M=$2 wd=$2/s3/$BUCKET/$1 d=$W/data/stage/$1 n=0 m links=""
  mkdir -p "$d"
  for m in $STAGE_MIB; do
    n=$((n + 1))
    links+="    rm -f in$n.bam"$'\n'"    ln -s $M/s3/$BUCKET/stage/in$n.bam in$n.bam"$'\n'
  done
  links+="    ln -s $M/s3/$BUCKET/stage/in$n.bam.bai in$n.bam.bai"
  cat >"$d/.command.run" <<EOF
#!/bin/bash
NXF_CHDIR=$wd
### ---
### name: 'STAGE_BENCH ($key)'
### outputs:
### - 'out.bin'
### ...
set -e
set -u
on_exit() { exit_status=\${nxf_main_ret:=\$?}; printf -- \$exit_status > $wd/.exitcode; exit \$exit_status; }
nxf_launch() { /bin/bash -ue $wd/.command.sh; }
nxf_stage() {
    true
    # stage input files
$links
}
nxf_main() {
    trap on_exit EXIT
    [[ "\${NXF_CHDIR:-}" ]] && cd "\$NXF_CHDIR"
    touch $wd/.command.begin
    nxf_stage
    (set -o pipefail; (nxf_launch | tee .command.out) 3>&1 1>&2 2>&3 | tee .command.err) 3>&1 1>&2 2>&3 &
    pid=\$!; wait \$pid || nxf_main_ret=\$?
}
nxf_main
EOF
  printf '#!/bin/bash -ue\npython3 %s --compute-x %s --inputs %s --src %s --out out.bin\n' "$LIB/stagetask.py" \
    "$STAGE_COMPUTE_X" "$(seq -f 'in%g.bam' 1 "$n" | tr '\n' ' ')" "$W/data/stage/out.bin" >"$d/.command.sh"
  aws_direct s3 cp "$d/.command.run" "s3://$BUCKET/$key/.command.run"
  aws_direct s3 cp "$d/.command.sh" "s3://$BUCKET/$key/.command.sh"
}

# stage_run MODE(on|off) REP: STAGE_TASKS tasks, each its own ferry and
# empty cache; sets STAGE_WALL, STAGE_FAILED and appends each ferry's
# summary line to $W/stage-summaries.
stage_run() {
  local mode=$1 rep=$2 i pids=() key M t0 p
  for ((i = 0; i < STAGE_TASKS; i++)); do
    stage_scripts "work/stage-$mode-$rep-$i" "$W/tmnt/stage-$i"
    rm -rf "$W/cache/stage-$i"
  done
  drop_caches
  t0=$(now)
  for ((i = 0; i < STAGE_TASKS; i++)); do
    key=work/stage-$mode-$rep-$i M=$W/tmnt/stage-$i
    mkdir -p "$M"; echo "$M" >>"$W/mounts"
    FERRY_MOUNT_POINT=$M FUSION_CACHE_LOCATION=$W/cache/stage-$i FUSION_WORK=$M/s3/$BUCKET/$key \
      FERRY_STAGE_INPUTS=$mode AWS_S3_ENDPOINT=$BENCH_S3 FUSION_LOG_LEVEL=${FERRY_LOG_LEVEL:-info} \
      bg "stage-$mode-$rep-$i" timeout "${STAGE_CAP:-600}" "$W/bin/fusion" bash "$M/s3/$BUCKET/$key/.command.run"
    pids+=("$BG_PID")
  done
  STAGE_FAILED=0
  for p in "${pids[@]}"; do wait "$p" || STAGE_FAILED=$((STAGE_FAILED + 1)); done
  STAGE_WALL=$(elapsed "$t0" "$(now)")
  for ((i = 0; i < STAGE_TASKS; i++)); do
    grep -h '"type":"ferry.summary"' "$W/logs/stage-$mode-$rep-$i.log" >>"$W/stage-summaries.$mode" || true
    rm -rf "$W/cache/stage-$i"
  done
  python3 "$LIB/s3.py" delete-prefix "$BUCKET" "work/stage-$mode-$rep-" >/dev/null 2>&1 || true
  log "  staging $mode, run $rep: ${STAGE_WALL} s$([ "$STAGE_FAILED" = 0 ] || echo " ($STAGE_FAILED failed)")" \
    "$(grep -ho 'stagetask: .*' "$W"/logs/stage-"$mode-$rep"-*.log | sed 's/stagetask: //' | tr '\n' ';')"
}

# stage_sum MODE FIELD: the sum of the stage object's FIELD over the runs (MiB).
stage_sum() {
  python3 - "$W/stage-summaries.$1" "$2" <<'PY'
import json, sys
t = 0
for line in open(sys.argv[1]):
    t += json.loads(line).get("stage", {}).get(sys.argv[2], 0)
print("%.1f" % (t / 1048576))
PY
}

stage_workload() {
  local r walls_on="" walls_off="" failed=0 off on ratio cwall t0
  STAGE_REPS=${STAGE_REPS:-$([ "$BENCH_MODE" = full ] && echo 3 || echo 1)}
  STAGE_TASKS=${STAGE_TASKS:-1} STAGE_COMPUTE_X=${STAGE_COMPUTE_X:-3}
  mkdir -p "$W/bin" && ln -sf "$FERRY" "$W/bin/fusion"
  : >"$W/stage-summaries.on"; : >"$W/stage-summaries.off"
  stage_seed
  t0=$(now)
  python3 "$LIB/stagetask.py" --compute-only --compute-x "$STAGE_COMPUTE_X" --mib $STAGE_MIB
  cwall=$(elapsed "$t0" "$(now)")
  for ((r = 1; r <= STAGE_REPS; r++)); do
    stage_run off "$r"; walls_off+=" $STAGE_WALL"; failed=$((failed + STAGE_FAILED))
    stage_run on "$r"; walls_on+=" $STAGE_WALL"; failed=$((failed + STAGE_FAILED))
  done
  local what="$STAGE_TASKS task(s) x inputs $STAGE_MIB MiB (+${STAGE_INDEX_KIB} KiB index) read one after the other with ${STAGE_COMPUTE_X} SHA-256 passes per MiB after each (compute alone ${cwall} s), ${STAGE_OUT_MIB} MiB out; cold; median of $STAGE_REPS"
  if [ "$failed" != 0 ]; then
    record ferry stage_wall_on unsupported "" "$failed runs failed; see the stage-*.log files"
    return 0
  fi
  off=$(echo "$walls_off" | median) on=$(echo "$walls_on" | median)
  ratio=$(awk -v a="$off" -v b="$on" 'BEGIN{printf "%.2f", a/b}')
  record ferry stage_wall_off "$off" s "$what; runs:$walls_off"
  record ferry stage_wall_on "$on" s "$what; runs:$walls_on"
  record ferry stage_speedup "$ratio" ratio "wall off / wall on (target >= 1.3)"
  record ferry stage_wasted "$(stage_sum on wasted_bytes)" MiB "staged and never read, all runs; staged $(stage_sum on staged_bytes) MiB, hits $(stage_sum on hit_bytes) MiB"
}

# Standalone: its own environment, CSV and log.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  BENCH_MODE=${1:-quick}
  case $BENCH_MODE in quick | full) ;; *) sed -n '2,15p' "$0"; exit 2 ;; esac
  ROOT=$(cd "$(dirname "$0")/.." && pwd)
  LIB=$ROOT/bench/lib
  TOOLS=${TOOLS:-$ROOT/.tools}
  export PATH=$TOOLS/bin:$PATH
  unset AWS_CA_BUNDLE AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_S3_ENDPOINT
  FERRY=${FERRY:-$ROOT/bin/ferry}
  [ -x "$FERRY" ] || { echo "no $FERRY: run make build" >&2; exit 1; }
  mkdir -p "$ROOT/bench/results"
  OUT=$ROOT/bench/results/${BENCH_OUT:-$(date +%F)-stage-$BENCH_MODE}
  CSV=$OUT.csv
  W=$(mktemp -d /tmp/ferry-stage.XXXXXX)
  mkdir -p "$W/logs" "$W/cache" "$W/tmnt"
  : >"$W/pids"; : >"$W/mounts"
  exec 2> >(tee "$OUT.log" >&2)
  . "$LIB/common.sh"
  . "$LIB/env.sh"
  stage_cleanup() {
    set +e
    local p m
    for p in $(tac "$W/pids"); do stop_pid "$p" 30; done
    for m in $(sort -u "$W/mounts"); do unmount "$m"; umount -l "$m" 2>/dev/null; done
    if [ "${BENCH_KEEP:-0}" = 1 ]; then log "scratch kept in $W"; else rm -rf "$W"; fi
  }
  trap stage_cleanup EXIT
  trap 'log "interrupted"; exit 130' INT TERM
  echo "contender,metric,value,unit,note" >"$CSV"
  log "staged-input workload, mode $BENCH_MODE, load $(cut -d' ' -f1-3 /proc/loadavg), scratch $W"
  env_start
  run_begin ferry-stage
  stage_workload
  run_end ferry-stage
  log "done: $CSV (load now $(cut -d' ' -f1-3 /proc/loadavg))"
fi
