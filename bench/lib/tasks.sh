# Task workload: TASKS concurrent tasks (lib/task.py) each read the
# shared reference ref/ref.bin sequentially and at random, compute, and write a
# TASK_OUT_MB MiB output under tout/<contender>/. Wall time runs from just
# before the first mount (caches empty, drop_caches) until every output is
# listed on the unproxied port. Data-handling efficiency = the wall time of the
# same tasks doing only their compute step / that wall time (1.0 = I/O is free).
#   ferry: one `ferry run` per task, all with one --cache-dir (each task its own mount)
#   other FUSE clients: one shared mount for all tasks (one cache per client)
#   copy: aws s3 cp of the reference per task, run on local disk, aws s3 cp up
# Every task is capped at TASK_CAP seconds (a capped task counts as failed).
# RSS/CPU: the client daemons only (not the task processes).

task_args() { # SEED REF OUT
  echo --seed "$1" --compute-mib "$TASK_COMPUTE_MIB" --ref "$2" --src "$W/data/out.bin" --out "$3"
}

# Each count of TASK_COUNTS runs the task workload with that many tasks;
# the first count's metrics are task_wall, ..., the others' end in _<n>t
# (TSFX, set by tasks_round).
TSFX=${TSFX:-}

# TASK_RUNS runs of the task workload for the contenders and baselines of
# TASK_REPEAT (the subjects of the task targets' ratios), one for the others;
# the report takes the median of each task metric recorded more than once.
TASK_RUNS=${TASK_RUNS:-1}
TASK_REPEAT=${TASK_REPEAT:-${BENCH_TASK_REPEAT:-ferry s3fs copy}}
# task_runs NAME CMD...: CMD once per run of NAME; the runs after the first
# leave the contender's CPU and RSS totals (TOT_CPU, TOT_PEAK) as the first
# left them, so that every contender's totals count one run.
task_runs() {
  local name=$1 r n=1 cpu peak
  shift
  [[ " $TASK_REPEAT " == *" $name "* ]] && n=$TASK_RUNS
  for ((r = 1; r <= n; r++)); do
    cpu=$TOT_CPU peak=$TOT_PEAK
    [ "$n" = 1 ] || log "  $name: task run $r of $n ($TASKS tasks)"
    "$@"
    [ "$r" = 1 ] || TOT_CPU=$cpu TOT_PEAK=$peak
  done
}
# tasks_contender C: one run of the tasks on a FUSE contender (a ferry run
# per task and one mount for ferry, one mount for the others).
tasks_contender() {
  if [[ $1 == ferry* ]]; then tasks_ferry "$1"; else tasks_fuse "$1" || log "$1: tasks aborted (mount failed)"; fi
  c_umount "$1"
}
# tasks_clear PREFIX: delete the outputs of an earlier run under PREFIX, so
# that the wait for this run's outputs does not count them.
tasks_clear() {
  local n
  n=$(python3 "$LIB/s3.py" delete-prefix "$BUCKET" "$1" 2>&1) || log "delete $1: $n"
}

# tasks_quiet: every run of the tasks starts on a quiet MinIO (env_quiesce,
# at most TASK_QUIESCE_MAX s, default 60): after the 2 GiB of outputs of
# the run before, MinIO's background work would otherwise land in the
# next run's read phase.
tasks_quiet() { QUIESCE_MAX=${TASK_QUIESCE_MAX:-60} env_quiesce; }
# tasks_round N: set TASKS, TSFX and TASK_COMPUTE_WALL for a round of N tasks.
tasks_round() {
  TASKS=$1
  if [ "$1" = "${TASK_COUNTS:-$1}" ] || [ "$1" = "${TASK_COUNTS%% *}" ]; then TSFX=; else TSFX=_${1}t; fi
  local v=TASK_COMPUTE_WALL_$1
  TASK_COMPUTE_WALL=${!v:-}
}

# tasks_compute_ref: wall time of the compute steps alone (same concurrency),
# for every count of TASK_COUNTS; the shorter of two runs each (the machine
# is shared: the faster run is the one closer to "no interference").
tasks_compute_ref() {
  local n
  for n in ${TASK_COUNTS:-$TASKS}; do
    tasks_round "$n"
    tasks_compute_ref1
    printf -v "TASK_COMPUTE_WALL_$n" %s "$TASK_COMPUTE_WALL"
  done
}

tasks_compute_ref1() {
  local i r pids t0 w
  TASK_COMPUTE_WALL=
  for r in 1 2; do
    pids=(); t0=$(now)
    for ((i = 0; i < TASKS; i++)); do
      python3 "$LIB/task.py" --compute-only --seed "$i" --compute-mib "$TASK_COMPUTE_MIB" & pids+=($!)
    done
    wait "${pids[@]}"
    w=$(elapsed "$t0" "$(now)")
    [ -z "$TASK_COMPUTE_WALL" ] || awk -v a="$w" -v b="$TASK_COMPUTE_WALL" 'BEGIN{exit !(a<b)}' && TASK_COMPUTE_WALL=$w
  done
  record compute-only "task_wall$TSFX" "$TASK_COMPUTE_WALL" s "$TASKS tasks x ${TASK_COMPUTE_MIB} MiB SHA-256; no I/O; shorter of 2 runs"
}

# tasks_finish CONTENDER T0 FAILED [PREFIX] [SUFFIX]: wait for the outputs
# (default prefix tout/CONTENDER/), record wall and efficiency (metrics
# task_wall, task_eff, with SUFFIX appended).
tasks_finish() {
  local c=$1 t0=$2 failed=$3 prefix=${4:-tout/$1$TSFX/} sfx=${5:-}$TSFX out
  if [ "$failed" != 0 ]; then
    record "$c" "task_wall$sfx" unsupported "" "$failed of $TASKS tasks failed or hit the ${TASK_CAP} s cap"; return 0
  fi
  if out=$(python3 "$LIB/s3.py" wait-count "$BUCKET" "$prefix" "$TASKS" 600); then
    local wall eff; wall=$(elapsed "$t0" "$out")
    eff=$(awk -v a="$TASK_COMPUTE_WALL" -v b="$wall" 'BEGIN{printf "%.3f", a/b}')
    record "$c" "task_wall$sfx" "$wall" s "$TASKS tasks; ref ${TASK_REF_MB} MiB; out ${TASK_OUT_MB} MiB each; until all outputs are listed${6:+; $6}"
    record "$c" "task_eff$sfx" "$eff" ratio "compute-only wall / wall"
    # Another FUSE client runs every task on its one mount: the same
    # figures are its "one mount for all tasks" ones.
    if [[ $c != ferry* ]] && [ "$sfx" = "$TSFX" ]; then
      record "$c" "task_wall_shared$TSFX" "$wall" s "the same run (one mount for all tasks)"
      record "$c" "task_eff_shared$TSFX" "$eff" ratio "the same run"
    fi
  else
    record "$c" "task_wall$sfx" timeout s "outputs not listed: $out"
  fi
}

# Page cache of the read phase (lib/pagecache.py): pc_start, after
# drop_caches and before the tasks start, notes Cached and waits in the
# background until every task has read the reference (task.py marks it in
# TASK_READ_DONE); pc_stop CONTENDER records the growth of Cached by then,
# less MinIO's own copy of the reference, per reference size (1.0 = the
# client kept one copy for all tasks; one copy per task gives TASKS).
pc_start() {
  PC_DIR=$W/readdone
  rm -rf "$PC_DIR"; mkdir -p "$PC_DIR"
  export TASK_READ_DONE=$PC_DIR
  python3 "$LIB/pagecache.py" "$PC_DIR" "$TASKS" "$W/minio/$BUCKET/ref" "$((TASK_REF_MB << 20))" "$W/pagecache.out" "$TASK_CAP" &
  PC_PID=$!
}
pc_stop() {
  wait "$PC_PID" 2>/dev/null || true
  unset TASK_READ_DONE
  record "$1" "task_pagecache$TSFX" "$(cat "$W/pagecache.out" 2>/dev/null || echo fail)" x \
    "growth of Cached until every task had read the reference (MinIO's copy excluded) / ${TASK_REF_MB} MiB"
  rm -f "$W/pagecache.out"
}

# Phases of a task run (task.py's TASK_TIMES): times_start before the tasks
# start; times_note T0 prints, from T0, when the last task had read the
# reference, and the medians of the tasks' read, compute and write phases
# (a note of the run's task_wall).
times_start() {
  TT_DIR=$W/times
  rm -rf "$TT_DIR"; mkdir -p "$TT_DIR"
  export TASK_TIMES=$TT_DIR
}
times_note() {
  unset TASK_TIMES
  cat "$TT_DIR"/* 2>/dev/null | awk -v t0="$1" '
    function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    { n++; r[n] = $2 - $1; c[n] = $3 - $2; w[n] = $4 - $3; if ($2 - t0 > last) last = $2 - t0
      if ($1 - t0 > start) start = $1 - t0; if ($4 - t0 > wend) wend = $4 - t0 }
    END { if (n) printf "all started after %.1f s; all read after %.1f s; all written after %.1f s; per task (median) read %.1f / compute %.1f / write %.1f s", start, last, wend, med(r, n), med(c, n), med(w, n) }'
}

# ferry_tasks SHARED(1|0) PREFIX [ARGS...]: one `ferry run` per task (each its
# own mount), all on one --cache-dir (1) or one each (0), with ARGS; sets
# FAILED and T0; samples RSS/CPU of the ferry processes (not their task children).
ferry_tasks() {
  local i pids=() fpids=() M cache=$W/cache/ferry-task p shared=$1 prefix=$2
  shift 2
  tasks_clear "$prefix"
  tasks_quiet
  rm -rf "$cache"; drop_caches
  pc_start
  times_start
  T0=$(now) FAILED=0
  for ((i = 0; i < TASKS; i++)); do
    M=$W/tmnt/ferry-$i; mkdir -p "$M"; echo "$M" >>"$W/mounts"
    [ "$shared" = 1 ] || cache=$W/cache/ferry-task/$i
    # shellcheck disable=SC2046
    AWS_S3_ENDPOINT=$BENCH_S3 bg "ferry-task-$shared-$i" timeout "$TASK_CAP" "$FERRY" run --mount-point "$M" \
      --cache-dir "$cache" --log-level "${FERRY_LOG_LEVEL:-info}" "$@" -- python3 "$LIB/task.py" \
      $(task_args "$i" "$M/s3/$BUCKET/ref/ref.bin" "$M/s3/$BUCKET/${prefix}task-$i.bin")
    pids+=("$BG_PID")
  done
  sleep 0.2
  for p in "${pids[@]}"; do fpids+=($(cat /proc/"$p"/task/*/children 2>/dev/null)); done
  meas_start "$(IFS=,; echo "${fpids[*]}")"
  for i in "${pids[@]}"; do wait "$i" || FAILED=$((FAILED + 1)); done
  meas_stop
  wait "$PC_PID" 2>/dev/null || true
  PC_FERRY=$(cat "$W/pagecache.out" 2>/dev/null || echo fail)
  unset TASK_READ_DONE
  TT_NOTE=$(times_note "$T0")
}

# tasks_ferry CONTENDER: the tasks with one `ferry run` each on one cache dir
# (the Nextflow model; ferry-nopt: --passthrough off; ferry-nocold:
# --cold-passthrough off), then on one mount of
# CONTENDER for all tasks.
tasks_ferry() {
  local c=$1 args=()
  [ "$c" = ferry-nopt ] && args=(--passthrough off)
  [ "$c" = ferry-nocold ] && args=(--cold-passthrough off)
  phase_reset
  ferry_tasks 1 "tout/$c$TSFX/" "${args[@]}"
  if [ "$FAILED" != 0 ]; then
    log "  $c run with one shared --cache-dir: $FAILED tasks failed: $(grep -h -m1 -i 'error\|in use' "$W"/logs/ferry-task-1-*.log | head -1)"
    record "$c" "task_shared_cache$TSFX" unsupported "" "concurrent ferry run on one --cache-dir failed; retried with one cache dir per task"
    env_clean "$c"
    phase_reset
    ferry_tasks 0 "tout/$c$TSFX/" "${args[@]}"
  fi
  tasks_finish "$c" "$T0" "$FAILED" "" "" "one ferry run per task; $TT_NOTE"
  record "$c" "task_pagecache$TSFX" "$PC_FERRY" x "one ferry run per task: growth of Cached until every task had read the reference (MinIO's copy excluded) / ${TASK_REF_MB} MiB"
  [ -n "$TSFX" ] || phase_record "$c" task "the $TASKS ferry processes"
  rm -rf "$W/cache/ferry-task"
  # The same tasks on one mount, as the other clients run them.
  tasks_fuse "$c" "tout/$c$TSFX/shared/" _shared
}

# tasks_fuse CONTENDER [PREFIX] [SUFFIX]: the tasks on one mount of
# CONTENDER (outputs under PREFIX, default tout/CONTENDER/); a contender
# other than ferry also records its figures as the "_shared" metrics (one
# mount for all tasks), beside ferry's own shared-mount run.
tasks_fuse() {
  local c=$1 prefix=${2:-tout/$1$TSFX/} sfx=${3:-} i pids=() t0 failed=0
  phase_reset
  c_umount "$c"; rm -rf "${W:?}/cache/$c"
  tasks_clear "$prefix"
  tasks_quiet
  drop_caches
  pc_start
  times_start
  t0=$(now)
  c_mount "$c" || { kill "$PC_PID" 2>/dev/null; unset TASK_READ_DONE; return 1; }
  meas_start "$C_PID" --tree
  for ((i = 0; i < TASKS; i++)); do
    # shellcheck disable=SC2046
    timeout "$TASK_CAP" python3 "$LIB/task.py" $(task_args "$i" "$C_ROOT/ref/ref.bin" "$C_ROOT/${prefix%/}/task-$i.bin") \
      >"$W/logs/$c-task$sfx-$i.log" 2>&1 & pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=$((failed + 1)); done
  tasks_finish "$c" "$t0" "$failed" "$prefix" "$sfx" "one mount for all tasks; $(times_note "$t0")"
  meas_stop
  if [[ $c == ferry* ]]; then wait "$PC_PID" 2>/dev/null || true; unset TASK_READ_DONE; else pc_stop "$c"; fi
  if [ -z "$sfx$TSFX" ]; then phase_record "$c" task "the mount daemon (one mount for all tasks)"; fi
  c_umount "$c"
}

tasks_copy() {
  local i pids=() t0 failed=0 d
  tasks_clear "tout/copy$TSFX/"
  tasks_quiet
  drop_caches
  pc_start
  t0=$(now)
  for ((i = 0; i < TASKS; i++)); do
    d=$W/copytask/$i; mkdir -p "$d"
    # shellcheck disable=SC2046
    ( aws_proxy s3 cp "s3://$BUCKET/ref/ref.bin" "$d/ref.bin" &&
      python3 "$LIB/task.py" $(task_args "$i" "$d/ref.bin" "$d/out.bin") &&
      aws_proxy s3 cp "$d/out.bin" "s3://$BUCKET/tout/copy$TSFX/task-$i.bin" ) >"$W/logs/copy-task-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=$((failed + 1)); done
  tasks_finish copy "$t0" "$failed"
  pc_stop copy
  rm -rf "$W/copytask"
}

tasks_local() {
  local i pids=() t0 failed=0
  drop_caches
  pc_start
  t0=$(now)
  for ((i = 0; i < TASKS; i++)); do
    # shellcheck disable=SC2046
    python3 "$LIB/task.py" $(task_args "$i" "$W/data/ref.bin" "$W/localtask/task-$i.bin") & pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=$((failed + 1)); done
  sync
  pc_stop local
  local wall; wall=$(elapsed "$t0" "$(now)")
  record local "task_wall$TSFX" "$wall" s "$TASKS tasks; outputs on local disk; after sync"
  record local "task_eff$TSFX" "$(awk -v a="$TASK_COMPUTE_WALL" -v b="$wall" 'BEGIN{printf "%.3f", a/b}')" ratio "compute-only wall / wall"
  rm -rf "$W/localtask"
}
